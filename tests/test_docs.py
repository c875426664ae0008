"""The docs measured against the code: the signals table, ``evtrain plugins``' output, the
README's index of docs/, the writers that journal, and every settings key and command-line flag
of every command documented somewhere in docs/ or the README."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import evtrain_writers
from evtrain._version import __version__
from evtrain.bus.writers import StatsWriter
from evtrain.cli import main
from evtrain.cli.parser import build_parser
from evtrain.config.environment_parameters import SAMPLERS, SamplerSpec
from evtrain.config.options import RunOptions
from evtrain.events import signals
from evtrain.trainers.registry import TRAINER_TYPES
from evtrain_writers._mlflow_options import MlflowOptions
from evtrain_writers._options import FileWriterOptions
from evtrain_writers.prometheus_writer import PrometheusOptions
from evtrain_writers.wandb_writer import WandbOptions
from tests.helpers import ROOT, tensorboard_steps

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
CODE = re.compile(r"^```.*?^```$|`[^`\n]+`", re.DOTALL | re.MULTILINE)


def section(page: Path, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) of ``page``, up to the next heading
    of the same or a higher level."""
    text = page.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(rf"^#{{1,{len(level)}}} ", text[start:], re.MULTILINE)
    return text[start:] if end is None else text[start : start + end.start()]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the first Markdown table in ``text``, header and rule left out."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def payload(cls: type[Any]) -> str:
    """``Name(field, ...)``: a payload class as the table writes it."""
    return f"{cls.__name__}({', '.join(field.name for field in attrs.fields(cls))})"


def test_the_signals_table_is_every_signal_in_order_with_every_field_of_its_payload() -> None:
    rows = table_rows(section(DOCS / "architecture.md", "## Signals"))
    documented = [(signal, payload) for signal, payload, _ in rows]
    defined = [(f"`{s.name}`", f"`{payload(s.payload_type)}`") for s in signals.ALL]
    assert documented == defined
    # and the table of signals.py's docstring, where the code is read
    assert signals.__doc__ is not None
    in_docstring = re.findall(r"^(\w+) +:class:`(\w+)`", signals.__doc__, re.MULTILINE)
    assert in_docstring == [(s.name, s.payload_type.__name__) for s in signals.ALL]


def words(line: str) -> list[str]:
    """A line of ``evtrain plugins``, its columns' padding and evtrain's version left out."""
    return [("VERSION" if word == __version__ else word) for word in line.split()]


def evtrains_own(lines: list[str]) -> list[list[str]]:
    """The group headers and evtrain's own plugins of ``evtrain plugins``' lines: which
    other distributions' plugins are installed beside it varies (the tests install a package
    of broken ones)."""
    return [words(line) for line in lines if not line.startswith(" ") or " evtrain " in line]


def test_evtrain_plugins_prints_evtrains_own_plugins_as_docs_plugins_shows_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    block = section(DOCS / "plugins.md", "## Seeing what is installed")
    shown = re.search(r"^```\n\$ evtrain plugins\n(.*?)^```$", block, re.DOTALL | re.MULTILINE)
    assert shown is not None
    assert main(["plugins"]) in (0, 1)  # 1: the broken fixture plugins fail, as they should
    printed = capsys.readouterr().out.splitlines()
    assert evtrains_own(shown[1].splitlines()) == evtrains_own(printed)
    assert [
        "default",
        "evtrain",
        "VERSION",
        "evtrain_writers:get_default_stats_writers",
        "loaded",
    ] in (evtrains_own(printed))


def test_the_readme_indexes_every_page_of_docs() -> None:
    index = (ROOT / "README.md").read_text().split("\n## Documentation\n", 1)[1].split("\n## ")[0]
    listed = re.findall(r"^- `(docs/[\w-]+\.md)` — ", index, re.MULTILINE)
    assert listed == sorted(set(listed), key=listed.index)  # each once
    assert sorted(listed) == [f"docs/{page.name}" for page in PAGES]


# What the docs call each writer of evtrain_writers.
WRITER_NAMES = {
    "ConsoleWriter": "the console",
    "CsvWriter": "CSV",
    "GaugeWriter": "gauges",
    "JsonlWriter": "JSONL",
    "MlflowWriter": "MLflow",
    "PrometheusWriter": "Prometheus",
    "TensorboardWriter": "TensorBoard",
    "WandbWriter": "wandb",
}


def evtrains_writers() -> Iterator[type[StatsWriter]]:
    """Every writer class defined in a public module of ``evtrain_writers`` (the private ones
    hold bases and helpers)."""
    for info in pkgutil.iter_modules(evtrain_writers.__path__, "evtrain_writers."):
        if info.name.rsplit(".", 1)[1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            writer = isinstance(value, type) and issubclass(value, StatsWriter)
            if writer and value.__module__ == module.__name__:
                yield value


def names_listed(text: str) -> set[str]:
    """``MLflow and wandb`` or ``A, B and C`` as a set of names."""
    return set(re.split(r", | and ", text))


def test_the_writers_the_docs_say_journal_are_those_whose_overflow_is_spool() -> None:
    writers = {WRITER_NAMES[cls.__name__]: cls for cls in evtrains_writers()}
    assert set(WRITER_NAMES.values()) == set(writers)  # a new writer: name it above
    spooled = {name for name, cls in writers.items() if cls.overflow == "spool"}
    delivery = section(DOCS / "delivery.md", "## Spool: lossless without waiting")
    said = re.search(r"remote tracker \(evtrain's (.*?) writers;", delivery.replace("\n", " "))
    assert said is not None
    assert names_listed(said[1]) == spooled
    trackers = (DOCS / "trackers.md").read_text().replace("\n", " ")
    said = re.search(r"\*\*Outages\*\* \((.*?) use the `spool` policy", trackers)
    assert said is not None
    assert names_listed(said[1]) == spooled


def attrs_classes(hint: Any) -> Iterator[type[Any]]:
    """The attrs classes a type hint names, inside ``dict[str, X]``, ``X | None``..."""
    if isinstance(hint, type) and attrs.has(hint):
        yield hint
    for argument in typing.get_args(hint):
        yield from attrs_classes(argument)


def settings_keys() -> dict[str, set[str]]:
    """Every key of the YAML (as it spells them), with the settings classes holding it: the run
    options' classes walked from ``RunOptions``, each trainer type's ``hyperparameters``, each
    sampler's ``sampler_parameters`` and each writer's ``writers.<name>`` options."""
    writers = (FileWriterOptions, MlflowOptions, PrometheusOptions, WandbOptions)
    hyperparameters = [t.settings for t in TRAINER_TYPES.values()]
    todo: list[type[Any]] = [RunOptions, *hyperparameters, SamplerSpec, *SAMPLERS.values()]
    todo += writers
    seen: set[type[Any]] = set()
    keys: dict[str, set[str]] = {}
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for field in attrs.fields(cls):
            keys.setdefault(field.name, set()).add(cls.__name__)
            todo.extend(attrs_classes(hints[field.name]))
    return keys


def documented_text() -> str:
    return "\n".join(page.read_text() for page in [*PAGES, ROOT / "README.md"])


def test_every_settings_key_is_documented() -> None:
    """As `` `key` ``, `` `path.to.key` `` or ``key:`` (in a YAML block or a sentence)."""
    text = documented_text()
    keys = settings_keys()
    assert {
        "run_id",
        "block_timeout",
        "sampler_type",
        "st_dev",
        "min_value",
        "port",
        "hidden_keys",
    } <= set(keys)
    missing = {
        key: sorted(holders)
        for key, holders in keys.items()
        if not re.search(rf"`(?:[^`\s]*\.)?{key}`|(?<![\w.-]){key}:", text)
    }
    assert missing == {}


def commands() -> Iterator[tuple[str | None, argparse.ArgumentParser]]:
    """``(None, evtrain's parser)``, then each command's name and parser."""
    parser = build_parser()
    yield None, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def flags(parser: argparse.ArgumentParser) -> list[str]:
    """The options of ``parser`` a user sees in its ``--help`` (help itself left out)."""
    return [
        flag
        for action in parser._actions
        if action.option_strings and action.help is not argparse.SUPPRESS
        if not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
    ]


def blocks_about(command: str | None) -> Iterator[str]:
    """Where a command's flags are documented: for ``learn`` (and the options before any
    command), configuration.md's "Command-line flags"; for another command, each paragraph,
    table or list that names ``evtrain COMMAND``, and the whole page whose title names it."""
    if command in (None, "learn"):
        yield section(DOCS / "configuration.md", "## Command-line flags")
        return
    for page in [*PAGES, ROOT / "README.md"]:
        text = page.read_text()
        if f"evtrain {command}" in text.splitlines()[0]:
            yield text
        yield from (block for block in re.split(r"\n\s*\n", text) if f"evtrain {command}" in block)


def test_every_flag_of_every_command_is_documented() -> None:
    """In code (`` `--flag ...` `` or a code block), where the command is described."""
    missing = []
    everywhere = flags(build_parser())  # --debug, also after most commands: documented once
    for command, parser in commands():
        code = "\n".join(CODE.findall("\n\n".join(blocks_about(command))))
        for flag in flags(parser):
            if command is not None and flag in everywhere:
                continue
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", code):
                missing.append(f"evtrain {command or ''} {flag}".replace("  ", " "))
    assert missing == [], missing


@pytest.mark.parametrize(
    "argv",
    [
        ["learn", "config.yaml"],
        ["record", "config.yaml", "--episodes", "1", "--output", "demos.npz"],
        ["sync", "run"],
        ["demo"],
        ["compare", "results/run"],
        ["sweep", "config.yaml", "--study", "s", "--trials", "1"],
    ],
)
def test_debug_goes_after_every_command_but_plugins(argv: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([*argv, "--debug"]).debug is True
    assert parser.parse_args(["--debug", *argv]).debug is True
    assert parser.parse_args(argv).debug is False


def test_plugins_takes_debug_before_the_command_only(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["--debug", "plugins"]).debug is True
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["plugins", "--debug"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --debug" in capsys.readouterr().err


def test_evtrain_demo_does_what_the_readmes_commands_table_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = next(
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("| `evtrain demo ")
    )
    assert "`evtrain demo [--run-id ID] [--results-dir DIR] [--steps N]`" in row
    assert "every 1,000 of its `N` steps (default 50000)" in row
    assert "(default `results/demo/`)" in row
    defaults = build_parser().parse_args(["demo"])
    assert (defaults.run_id, defaults.results_dir, defaults.steps) == ("demo", "results", 50_000)
    results = tmp_path / "results"
    argv = ["demo", "--run-id", "d", "--results-dir", str(results), "--steps", "3000"]
    assert main(argv) == 0
    assert tensorboard_steps(results / "d" / "Demo", "Environment/Cumulative Reward") == [
        1000,
        2000,
        3000,
    ]
    assert capsys.readouterr().out.splitlines() == [
        f"TensorBoard files: {results / 'd' / 'Demo'}",
        f"Run logs:          {results / 'd' / 'run_logs' / 'timers.json'}",
        f"View with:         tensorboard --logdir {results}",
    ]
    assert (results / "d" / "run_logs" / "timers.json").is_file()
