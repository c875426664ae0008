"""The README's Python snippets, run as written, and the wheel a user installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT, clean_env, isolated_site, python

STEPS = 1000
"""The ``max_steps`` of the example the ``learn`` snippet trains, here: 1,024 steps, 4 rollouts."""
SNIPPET = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def readme_snippets() -> list[str]:
    return SNIPPET.findall((ROOT / "README.md").read_text())


def test_the_readme_has_python_snippets() -> None:
    assert len(readme_snippets()) >= 2
    assert any("evtrain.learn(" in snippet for snippet in readme_snippets())


@pytest.mark.parametrize("index", range(len(readme_snippets())))
def test_a_readme_snippet_runs_as_written(index: int, tmp_path: Path) -> None:
    """In a folder holding the examples, as a user in a clone of the repository would; the
    snippet's text as written, only the training it starts shorter (``cartpole_ppo.yaml``'s
    ``max_steps``: 100,000 steps would take half a minute and prove nothing more about the
    snippet: the example config itself trains in test_example_configs.py)."""
    snippet = readme_snippets()[index]
    configs = shutil.copytree(ROOT / "examples" / "configs", tmp_path / "examples" / "configs")
    example = configs / "cartpole_ppo.yaml"
    shortened = example.read_text().replace("    max_steps: 100000\n", f"    max_steps: {STEPS}\n")
    assert shortened != example.read_text()
    example.write_text(shortened)
    (tmp_path / "snippet.py").write_text(snippet)
    result = python("snippet.py", cwd=tmp_path, env=clean_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines  # every snippet prints what it shows
    if "evtrain.learn(" in snippet:
        final = Path("results", "evtrain", "CartPole.onnx")
        steps = -(-STEPS // 256) * 256  # to the end of the rollout (8 envs x 32 steps)
        assert lines[-1] == f"completed {{'CartPole': {steps}}} {{'CartPole': {final!r}}}"
        assert f"CartPole at step {steps}: {final}" in lines
        assert (tmp_path / final).exists()


def test_ci_runs_the_readmes_test_command_and_what_the_readme_says_around_it() -> None:
    """The README's second Quickstart line, command by command, is what ``.ci/run`` runs
    (with the broken-plugins fixture installed after the setup), the wheel's smoke test
    before the tests, and the lint and type checks after them, as the README says."""
    readme = (ROOT / "README.md").read_text()
    quickstart = re.search(r"^## Quickstart\n\n```bash\n(.*?)^```$", readme, re.S | re.M)
    assert quickstart is not None
    test_line = quickstart.group(1).splitlines()[1]
    commands = test_line.split(" && ")
    assert commands[-1] == ".venv/bin/python -m pytest"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    lines = [ci.index(command) for command in commands]
    assert lines == sorted(lines)
    fixture = ci.index(".venv/bin/pip install -q --no-deps tests/fixtures/broken_plugins")
    wheel = next(i for i, line in enumerate(ci) if line.startswith(".venv/bin/pip wheel "))
    smoke = [i for i, line in enumerate(ci) if '/venv/bin/evtrain" plugins' in line]
    smoke += [i for i, line in enumerate(ci) if '/venv/bin/evtrain" learn' in line]
    checks = [
        ci.index(f".venv/bin/{check}")
        for check in ("ruff check .", "ruff format --check .", "mypy")
    ]
    assert lines[1] < fixture < wheel < min(smoke) and max(smoke) < lines[-1] < min(checks)
    assert "cp examples/configs/cartpole_ppo.yaml" in "\n".join(ci)
    for said in (
        "`ruff check .`",
        "`ruff format --check .`",
        "`mypy`",
        "tests/fixtures/broken_plugins",
    ):
        assert said in readme


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    """This venv's pip, quietly: pip warns through its own logging, which ``-W error`` would
    not see anyway, so it runs without the suite's warning flags."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args, "--quiet"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_the_wheel_holds_every_package_and_runs(tmp_path: Path) -> None:
    """Built as ``pip wheel .`` builds it, installed to a folder, and run without the source
    tree: ``python -S`` skips the ``.pth`` files, so the editable install of this checkout is
    not on the path, only the wheel's files and the other packages."""
    built = pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        str(tmp_path / "dist"),
        str(ROOT),
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("evtrain-*.whl")
    packages = {
        str(path.parent.relative_to(root)).replace("/", ".")
        for root in (ROOT / "src", ROOT / "writers")
        for path in root.rglob("__init__.py")
    }
    in_wheel = {
        name.rsplit("/", 1)[0].replace("/", ".")
        for name in zipfile.ZipFile(wheel).namelist()
        if name.endswith("/__init__.py")
    }
    assert packages <= in_wheel
    site = tmp_path / "site"
    installed = pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel))
    assert installed.returncode == 0, installed.stderr
    env = clean_env(PYTHONPATH=f"{site}:{isolated_site()}")
    where = python("-S", "-c", "import evtrain.trainers; print(evtrain.__file__)", env=env)
    assert where.stdout.strip() == str(site / "evtrain" / "__init__.py"), where.stderr
    listing = python("-S", "-m", "evtrain", "plugins", env=env)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert "ppo" in listing.stdout and "evtrain_writers:get_default_stats_writers" in listing.stdout
