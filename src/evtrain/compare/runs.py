"""Which runs ``evtrain compare`` reads, and how they are grouped.

Each argument names run folders: a folder, or a glob of folders (``'results/ppo-*'``), taken
as a path first and, when that matches no run, under ``--results-dir`` (so ``ppo-*`` finds
``results/ppo-*``).  Each argument is a group (its seeds), named as it was given; with
``--group-by REGEX`` the runs of every argument are pooled and grouped by the regular
expression's match in their run id instead (its first parenthesised group, or the whole
match).  Every problem is a :class:`~evtrain.errors.ConfigError` line saying what to give.
"""

from __future__ import annotations

import glob
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import attrs

from evtrain.compare.reading import Series, has_data, read_stat, series
from evtrain.errors import ConfigError

_LOG = logging.getLogger(__name__)

_SHOWN_KEYS = 12
"""How many of the keys a run does have an error names."""


@attrs.frozen(kw_only=True)
class Group:
    """Runs whose scores are aggregated together: the seeds of one configuration."""

    name: str
    runs: tuple[Path, ...]


def find_groups(
    patterns: Sequence[str], results_dir: Path, group_by: str | None = None
) -> list[Group]:
    """The groups of run folders ``patterns`` name (see the module's docstring)."""
    problems: list[str] = []
    matched: list[tuple[str, list[Path]]] = []
    for pattern in patterns:
        runs = _run_folders(pattern, results_dir, problems)
        matched.append((pattern, runs))
    if problems:
        raise ConfigError(problems)
    if group_by is None:
        return [Group(name=pattern, runs=tuple(runs)) for pattern, runs in matched]
    return _grouped_by(group_by, [run for _, runs in matched for run in runs])


def _run_folders(pattern: str, results_dir: Path, problems: list[str]) -> list[Path]:
    """The run folders ``pattern`` matches as a path or, when none, under ``results_dir``.

    A glob leaves out the folders it matches that are not runs (a ``plots`` folder beside
    the runs); a folder named without a glob must be a run.
    """
    as_path = _matches(pattern)
    under = _matches(str(results_dir / pattern))
    for candidates in (as_path, under):
        runs = [candidate for candidate in candidates if _is_run(candidate)]
        if runs and (_is_glob(pattern) or len(runs) == len(candidates)):
            return runs
    candidates = as_path or under
    if not candidates:
        problems.append(
            f"RUN_OR_GLOB {pattern!r}: no folder matches it, as a path or under --results-dir "
            f"{str(results_dir)!r}; give a run folder, a run id under --results-dir, or a glob "
            "of them in quotes (e.g. 'results/ppo-*')"
        )
    elif _is_glob(pattern):
        shown = ", ".join(repr(str(c)) for c in candidates[:_SHOWN_KEYS])
        problems.append(
            f"RUN_OR_GLOB {pattern!r}: none of the folders it matches is a run folder (none "
            f"of their folders holds TensorBoard event files, progress.csv or stats.jsonl): "
            f"{shown}"
        )
    else:
        (candidate,) = candidates
        line = (
            f"RUN_OR_GLOB {pattern!r}: {str(candidate)!r} is not a run folder (none of its "
            "folders holds TensorBoard event files, progress.csv or stats.jsonl)"
        )
        if any(_is_run(child) for child in _children(candidate)):
            line += f"; the folders in it are runs: give {str(candidate / '*')!r}"
        problems.append(line)
    return []


def _is_glob(pattern: str) -> bool:
    return re.search(r"[*?[]", pattern) is not None


def _matches(pattern: str) -> list[Path]:
    """The folders ``pattern`` (a path or a glob) names, sorted, each once."""
    found = sorted({Path(p).resolve() for p in glob.glob(pattern) if Path(p).is_dir()})
    return [_shorter(path) for path in found]


def _shorter(path: Path) -> Path:
    """``path`` relative to the working folder when it is inside it (shorter to print)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _children(folder: Path) -> list[Path]:
    return sorted(child for child in folder.iterdir() if child.is_dir())


def _is_run(folder: Path) -> bool:
    """Whether ``folder`` holds a behavior's folder of summaries."""
    return any(has_data(child) for child in _children(folder))


def _grouped_by(regex: str, runs: list[Path]) -> list[Group]:
    try:
        compiled = re.compile(regex)
    except re.error as error:
        raise ConfigError(
            [f"--group-by {regex!r}: not a regular expression ({error}); e.g. '(.*)-seed\\d+'"]
        ) from error
    groups: dict[str, list[Path]] = {}
    unmatched = []
    for run in dict.fromkeys(runs):  # each run once, in the order given
        match = compiled.search(run.name)
        if match is None:
            unmatched.append(run.name)
            continue
        key = match.group(1) if compiled.groups else match.group(0)
        groups.setdefault(key, []).append(run)
    if unmatched:
        raise ConfigError(
            [
                f"--group-by {regex!r}: the run ids {', '.join(map(repr, unmatched))} do not "
                "match it; every run needs a group (its first parenthesised group, or the "
                "whole match): widen the expression or leave those runs out"
            ]
        )
    return [Group(name=name, runs=tuple(members)) for name, members in groups.items()]


def read_group(group: Group, stat: str, behavior: str | None = None) -> list[Series]:
    """The curve of ``stat`` of every behavior (or only ``behavior``) of every run of
    ``group`` that records it, task after task (behaviors sorted by name)."""
    problems: list[str] = []
    found: list[Series] = []
    for run in group.runs:
        folders = [child for child in _children(run) if has_data(child)]
        if behavior is not None:
            if behavior not in [folder.name for folder in folders]:
                names = ", ".join(folder.name for folder in folders)
                problems.append(
                    f"--behavior {behavior!r}: run {str(run)!r} has no such behavior; its "
                    f"behaviors: {names}"
                )
                continue
            folders = [run / behavior]
        keys: set[str] = set()
        before = len(found)
        for folder in folders:
            result = read_stat(folder, stat)
            for warning in result.warnings:
                _LOG.warning(warning)
            keys |= result.keys
            if result.source is not None:
                found.append(series(run.name, folder.name, result))
        if len(found) == before:
            problems.append(_missing_stat(stat, run, keys))
    if problems:
        raise ConfigError(problems)
    return sorted(found, key=lambda s: s.task)  # stable: runs stay in order within a task


def _missing_stat(stat: str, run: Path, keys: set[str]) -> str:
    shown = sorted(keys)[:_SHOWN_KEYS]
    more = f" and {len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else ""
    listing = ", ".join(map(repr, shown)) + more if shown else "none"
    return (
        f"--stat {stat!r}: run {str(run)!r} holds no value of it (TensorBoard, progress.csv, "
        f"stats.jsonl); the stats it holds: {listing}"
    )
