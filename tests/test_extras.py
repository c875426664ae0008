"""Installing an extra: every message and page names a command that works for how evtrain was
installed (it is not on the package index), and says so in one place, README.md's "Installing
extras"."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evtrain.extras import command_for, install_command, install_hint
from tests.helpers import ROOT, python

BARE = re.compile(r"""pip\s+install\s+(?:-\S+\s+)*["']?evtrain\[""")
"""``pip install "evtrain[x]"``, quoted or not: it finds nothing, evtrain is not on the index."""

SECTION = "## Installing extras\n"


def pages_and_sources() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in ("src", "writers", "docs", "examples"):
        found += [
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in {".py", ".md", ".yaml", ".yml", ".toml", ".txt"}
            and not any(part.endswith(".egg-info") for part in path.parts)
        ]
    return found


def test_no_page_or_message_but_the_one_section_names_the_bare_install() -> None:
    named = {}
    for path in pages_and_sources():
        text = path.read_text()
        if path == ROOT / "README.md":
            section = text.split(SECTION)[1].split("\n## ")[0]
            assert len(BARE.findall(section)) == 1  # the one that says it finds nothing
            assert 'so `pip install "evtrain[mlflow]"` finds nothing' in " ".join(section.split())
            text = text.replace(section, "")
        if BARE.search(text):
            named[str(path.relative_to(ROOT))] = BARE.findall(text)
    assert named == {}


def test_this_checkout_names_its_own_path() -> None:
    """The suite runs on an editable install of this checkout (README.md's quickstart)."""
    assert install_command("plot") == f"pip install -e {shlex.quote(f'{ROOT}[plot]')}"
    assert install_hint("plot") == (
        f"install evtrain's 'plot' extra: {install_command('plot')} "
        "(README.md, 'Installing extras')"
    )


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (  # pip install -e .
            {"url": "file:///home/me/evtrain", "dir_info": {"editable": True}},
            "pip install -e '/home/me/evtrain[ray]'",
        ),
        (  # pip install . (from a folder with a space in its name)
            {"url": "file:///home/me/my%20evtrain", "dir_info": {}},
            "pip install '/home/me/my evtrain[ray]'",
        ),
        (  # pip install dist/evtrain-0.1.0-py3-none-any.whl
            {
                "url": "file:///home/me/dist/evtrain-0.1.0-py3-none-any.whl",
                "archive_info": {"hashes": {}},
            },
            "pip install '/home/me/dist/evtrain-0.1.0-py3-none-any.whl[ray]'",
        ),
        (  # pip install git+https://example.invalid/evtrain.git
            {
                "url": "https://example.invalid/evtrain.git",
                "vcs_info": {"vcs": "git", "commit_id": "34f3f5c"},
            },
            "pip install 'evtrain[ray] @ git+https://example.invalid/evtrain.git@34f3f5c'",
        ),
        (None, "pip install -e '.[ray]' in a checkout of evtrain"),  # no direct_url.json
    ],
)
def test_the_command_follows_how_evtrain_was_installed(
    direct_url: dict[str, object] | None, command: str
) -> None:
    assert command_for(direct_url, "ray") == command


def test_a_run_naming_a_writer_whose_extra_is_missing_says_how_to_install_it(
    tmp_path: Path,
) -> None:
    config = ROOT / "examples" / "configs" / "cartpole_mlflow.yaml"
    code = (
        "import sys; sys.modules['mlflow'] = None; from evtrain.cli import main; "
        f"sys.exit(main(['learn', {str(config)!r}, '--run-id', 'r', "
        f"'--results-dir', {str(tmp_path)!r}]))"
    )
    done = python("-c", code, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "evtrain: error: writers.mlflow: needs the mlflow package: install evtrain's 'mlflow' "
        f"extra: pip install -e {shlex.quote(f'{ROOT}[mlflow]')} (README.md, 'Installing "
        "extras')\n"
    )
    assert list(tmp_path.iterdir()) == []
