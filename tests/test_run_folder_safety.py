"""The run folder is the run's alone (docs/run-folder.md), through the real CLI: names that are
not names, ``--force`` on what evtrain did not make, symbolic links, a run that starts from
itself, two processes on one run, ``kill -9`` and starts that fail before their first step."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain.bus.journal import journal_backlog
from tests.helpers import config, isolated_python, run_evtrain

RULE = "a folder name (not empty, not . or .., no / or \\, no control characters)"


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): a file's text, a link's target."""
    found: dict[str, str] = {}
    for entry in sorted(root.rglob("*")):
        where = str(entry.relative_to(root))
        if entry.is_symlink():
            found[where] = f"-> {os.readlink(entry)}"
        elif entry.is_file():
            found[where] = entry.read_text(errors="replace")
        else:
            found[where] = "/"
    return found


def project(tmp_path: Path) -> dict[str, Any]:
    """A project folder with its sources and an earlier run beside the results: what a run
    id that is a path reached.  Returns the options of a run in ``project/results``."""
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / "src" / "train.py").write_text("print('my sources')\n")
    sibling = tmp_path / "project" / "results" / "sibling"
    (sibling / "run_logs").mkdir(parents=True)
    (sibling / ".evtrain-run").write_text("an evtrain run folder\n")
    (sibling / "configuration.yaml").write_text("behaviors: {}\n")
    options = config(tmp_path, max_steps=128, summary_freq=128, checkpoint_interval=128)
    options["checkpoint_settings"]["results_dir"] = "project/results"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    return options


def learn(tmp_path: Path, *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    return run_evtrain("learn", *args, cwd=tmp_path, process=process)


@pytest.mark.parametrize("run_id", [".", "..", "", "../../x", "ABSOLUTE", "a\\b", "a\x1bb"])
def test_cli_refuses_a_run_id_that_is_not_a_name(tmp_path: Path, run_id: str) -> None:
    project(tmp_path)
    if run_id == "ABSOLUTE":
        run_id = str(tmp_path / "elsewhere")
    before = tree(tmp_path)
    result = learn(tmp_path, "run.yaml", "--run-id", run_id, "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: checkpoint_settings.run_id: expected {RULE}, got {run_id!r}\n"
    )
    assert tree(tmp_path) == before  # the parent, the sources and the sibling run untouched


def test_initialize_from_and_behavior_names_are_names_too(tmp_path: Path) -> None:
    options = project(tmp_path)
    options["checkpoint_settings"]["run_id"] = "../sibling"  # the YAML's key, not the flag
    (tmp_path / "bad-id.yaml").write_text(yaml.safe_dump(options))
    options["checkpoint_settings"]["run_id"] = "run"
    options["behaviors"] = {"../../x": options["behaviors"]["CartPole"]}
    (tmp_path / "bad-behavior.yaml").write_text(yaml.safe_dump(options))
    before = tree(tmp_path)
    result = learn(tmp_path, "run.yaml", "--initialize-from", "..", "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: checkpoint_settings.initialize_from: expected {RULE}, got '..'\n"
    )
    result = learn(tmp_path, "bad-id.yaml", "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: checkpoint_settings.run_id: expected {RULE}, got '../sibling'\n"
    )
    result = learn(tmp_path, "bad-behavior.yaml")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: behaviors: expected each behavior name to be {RULE}, got '../../x'\n"
    )
    assert tree(tmp_path) == before


def test_sync_record_and_demo_refuse_a_run_id_that_is_not_a_name(tmp_path: Path) -> None:
    project(tmp_path)
    before = tree(tmp_path)
    result = run_evtrain("sync", "..", "--results-dir", "project/results", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"evtrain: error: RUN_ID: expected {RULE}, got '..'\n"
    result = run_evtrain(
        "record", "run.yaml", "--run-id", "..", "--episodes", "1", "--output", "x.npz",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: checkpoint_settings.run_id: expected {RULE}, got '..'\n"
    )
    result = run_evtrain(
        "demo", "--run-id", "../x", "--results-dir", "project/results", "--steps", "10",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: checkpoint_settings.run_id: expected {RULE}, got '../x'\n"
    )
    assert tree(tmp_path) == before


def test_force_removes_only_a_folder_evtrain_made_as_a_run(tmp_path: Path) -> None:
    project(tmp_path)
    mine = tmp_path / "project" / "results" / "notes"
    mine.mkdir()
    (mine / "ideas.txt").write_text("not a run\n")
    before = tree(tmp_path)
    result = learn(tmp_path, "run.yaml", "--run-id", "notes", "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "evtrain: error: project/results/notes is not an evtrain run folder (it has no "
        ".evtrain-run, and no configuration.yaml with run_logs/ as runs of earlier evtrain "
        "versions have), so evtrain will not use or remove it. Choose another --run-id or "
        "--results-dir, or move it away yourself.\n"
    )
    for flags in (["--resume"], ["--resume", "--inference"]):
        again = learn(tmp_path, "run.yaml", "--run-id", "notes", *flags)
        assert (again.returncode, again.stderr) == (2, result.stderr), flags
    assert tree(tmp_path) == before
    # A run of an evtrain from before the marker: configuration.yaml and run_logs/.
    old = tmp_path / "project" / "results" / "old"
    (old / "run_logs").mkdir(parents=True)
    (old / "configuration.yaml").write_text("behaviors: {}\n")
    (old / "CartPole-999.pt").write_text("stale")
    result = learn(tmp_path, "run.yaml", "--run-id", "old", "--force")
    assert result.returncode == 0, result.stderr
    assert not (old / "CartPole-999.pt").exists()
    assert (old / ".evtrain-run").is_file() and (old / "CartPole.onnx").is_file()


def test_force_removes_links_not_what_they_point_to(tmp_path: Path) -> None:
    project(tmp_path)
    precious = tmp_path / "precious"
    (precious / "inner").mkdir(parents=True)
    (precious / ".evtrain-run").write_text("an evtrain run folder\n")
    (precious / "inner" / "data.txt").write_text("keep me\n")
    results = tmp_path / "project" / "results"
    (results / "linked").symlink_to(precious, target_is_directory=True)
    run = results / "run"
    (run / "CartPole").mkdir(parents=True)
    (run / ".evtrain-run").write_text("an evtrain run folder\n")
    (run / "data").symlink_to(precious, target_is_directory=True)
    (run / "CartPole" / "inner").symlink_to(precious / "inner", target_is_directory=True)
    (run / "file-link").symlink_to(precious / "inner" / "data.txt")
    kept = tree(precious)
    warnings = {}
    for run_id in ("linked", "run"):
        result = learn(tmp_path, "run.yaml", "--run-id", run_id, "--force")
        assert result.returncode == 0, result.stderr
        folder = results / run_id
        assert not folder.is_symlink() and (folder / "CartPole.onnx").is_file()
        assert not [p for p in folder.rglob("*") if p.is_symlink()]
        warnings[run_id] = [ln for ln in result.stderr.splitlines() if "--force" in ln]
    assert tree(precious) == kept
    assert warnings == {
        "linked": [
            "[WARNING] --force: removing the link project/results/linked (not the folder it "
            "points to)"
        ],
        "run": ["[WARNING] --force: removing the earlier run in project/results/run"],
    }


def test_force_refuses_to_remove_the_run_it_starts_from(tmp_path: Path) -> None:
    options = project(tmp_path)
    base = tmp_path / "project" / "results" / "base"
    (base / "CartPole").mkdir(parents=True)
    (base / "run_logs").mkdir()
    (base / ".evtrain-run").write_text("an evtrain run folder\n")
    (base / "configuration.yaml").write_text("behaviors: {}\n")
    (base / "CartPole" / "checkpoint.pt").write_text("the trained weights")
    init_path = str(base / "CartPole" / "checkpoint.pt")
    options["behaviors"]["CartPole"]["init_path"] = init_path
    (tmp_path / "init.yaml").write_text(yaml.safe_dump(options))
    before = tree(tmp_path)
    result = learn(tmp_path, "run.yaml", "--run-id", "base", "--initialize-from", "base", "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "evtrain: error: --initialize-from 'base' lies in run 'base', which --force would "
        "remove before starting from it. Start the new run under another --run-id, or "
        "--resume 'base'.\n"
    )
    result = learn(tmp_path, "init.yaml", "--run-id", "base", "--force")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evtrain: error: behaviors.CartPole.init_path {init_path!r} lies in run 'base', "
        "which --force would remove before starting from it. Start the new run under another "
        "--run-id, or --resume 'base'.\n"
    )
    assert tree(tmp_path) == before


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """``evtrain learn ARGS`` in the background, its stderr piped."""
    return subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", *args],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if text in line:
            return
    raise AssertionError(f"the run ended (exit {proc.wait()}) without printing {text!r}")


def test_a_held_run_refuses_a_second_process_naming_the_holders_pid(tmp_path: Path) -> None:
    long = config(tmp_path, max_steps=10_000_000, summary_freq=256, checkpoint_interval=10**7)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(long))
    proc = start(tmp_path, "long.yaml")
    try:
        wait_for_line(proc, "CartPole. Step: 256")  # training is under way
        run = tmp_path / "results" / "run"
        refusal = (
            f"evtrain: error: run 'run' in {run} is in use by process {proc.pid} (it holds "
            f"{run / '.evtrain-lock'}). Wait for it to end, stop it, or choose another "
            "--run-id.\n"
        )
        for args in ([], ["--force"], ["--resume"]):
            result = learn(tmp_path, "long.yaml", *args)
            assert (result.returncode, result.stderr) == (2, refusal), args
        result = run_evtrain("sync", "run", "--results-dir", str(run.parent), cwd=tmp_path)
        assert (result.returncode, result.stderr) == (2, refusal)
        assert (run / "configuration.yaml").is_file() and (run / "CartPole").is_dir()
        assert proc.poll() is None  # the holder runs on, its folder whole
    finally:
        proc.kill()
        proc.communicate(timeout=60)


TRACKER = textwrap.dedent(
    """
    import time
    from pathlib import Path

    from evtrain import StatsWriter


    class GatedTracker(StatsWriter):
        '''A remote tracker (spool) that is down while the file `tracker-down` exists.'''

        overflow = "spool"

        def write_stats(self, category, values, step):
            while Path("tracker-down").exists():
                time.sleep(0.05)
            with open("delivered.txt", "a") as out:
                out.write(f"{step}\\n")


    def writers(options):
        return [GatedTracker()]


    EVTRAIN_PLUGINS = {"evtrain.stats_writer": {"gated": writers}}
    """
)


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "gated_tracker.py").write_text(TRACKER)
    (tmp_path / "tracker-down").write_text("")
    long = config(tmp_path, max_steps=10_000_000, summary_freq=128, checkpoint_interval=10**7)
    long["bus"] = {"stall_timeout": 0.2}  # the tracker's events go to its journal at once
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(long))
    proc = start(tmp_path, "long.yaml", "--plugins", "plugins")
    journal = tmp_path / "results" / "run" / "run_logs" / "journal"
    try:
        wait_for_line(proc, "CartPole. Step: 256")
        deadline = time.monotonic() + 60
        # run_started, the hyperparameters, then summaries: some of these are in the journal
        while journal_backlog(journal, "gated_tracker.GatedTracker") < 5:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)  # its lock goes with it; no checkpoint was due yet
        proc.communicate(timeout=60)
    assert not (tmp_path / "results" / "run" / "CartPole" / "checkpoint.pt").exists()
    (tmp_path / "tracker-down").unlink()  # the tracker is back
    short = config(tmp_path, max_steps=128, summary_freq=128, checkpoint_interval=128)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short))
    result = learn(tmp_path, "short.yaml", "--plugins", "plugins", "--resume")
    assert result.returncode == 0, result.stderr
    assert "CartPole: run 'run' has no checkpoint yet; it starts at step 0" in result.stderr
    delivered = [int(s) for s in (tmp_path / "delivered.txt").read_text().split()]
    killed = delivered[:-1]  # what the killed run journaled, then the new run's one summary
    assert len(killed) >= 1 and killed == list(range(128, 128 * len(killed) + 1, 128))
    assert delivered[-1] == 128
    assert journal_backlog(journal, "gated_tracker.GatedTracker") == 0


FAILING_ENV = textwrap.dedent(
    """
    def make_env(**kwargs):
        raise RuntimeError("the simulator is not installed")
    """
)
FAILING_PLUGIN = textwrap.dedent(
    """
    def connect(options, bus):
        raise RuntimeError("the tracker's token has expired")


    EVTRAIN_PLUGINS = {"evtrain.subscriber": {"tracker": connect}}
    """
)


@pytest.mark.parametrize("failing", ["environment", "required plugin"])
def test_a_start_that_fails_before_its_first_step_can_be_given_again(
    tmp_path: Path, failing: str
) -> None:
    options = config(tmp_path)
    if failing == "environment":
        (tmp_path / "simulator.py").write_text(FAILING_ENV)
        options["env_settings"]["env_id"] = "simulator:make_env"
        code, last = 1, "RuntimeError: the simulator is not installed"
    else:
        (tmp_path / "plugins").mkdir()
        (tmp_path / "plugins" / "tracker.py").write_text(FAILING_PLUGIN)
        options["plugins"] = {"paths": ["plugins"], "required": ["evtrain.subscriber:tracker"]}
        code, last = 2, "the tracker's token has expired"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    for _ in range(2):  # the same command, twice: the same error, not "already exists"
        # processes: the simulator and the plugin are modules of tmp_path, imported anew
        result = learn(tmp_path, "run.yaml", process=True)
        assert result.returncode == code, result.stderr
        assert last in result.stderr.rstrip().splitlines()[-1]
        assert not (tmp_path / "results" / "run").exists()


@pytest.mark.parametrize("linked", ["CartPole", "CartPole/progress.csv", "run_logs"])
def test_resume_refuses_a_run_folder_holding_a_link_and_touches_nothing_outside(
    tmp_path: Path, linked: str
) -> None:
    """A behavior folder, a file in it or ``run_logs`` that is a link out of the run: --resume
    would write, replace and rotate (``keep_checkpoints: 1``) files through it."""
    options = config(tmp_path, max_steps=256, summary_freq=128, checkpoint_interval=128)
    options["writers"] = {"csv": {}}  # beside the default TensorBoard
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    assert learn(tmp_path, "run.yaml").returncode == 0
    run = tmp_path / "results" / "run"
    outside = tmp_path / "outside" / Path(linked).name
    outside.parent.mkdir()
    (run / linked).rename(outside)
    (run / linked).symlink_to(outside, target_is_directory=outside.is_dir())
    if outside.is_dir() and linked == "CartPole":  # files named like checkpoints to rotate
        for step in (1, 2, 3):
            (outside / f"CartPole-{step}.pt").write_text(f"not the run's {step}\n")
    kept = tree(outside.parent)
    options["behaviors"]["CartPole"]["max_steps"] = 512
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    result = learn(tmp_path, "run.yaml", "--resume")
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"evtrain: error: {run / linked} is a symbolic link (to {outside}) in run 'run': "
        "evtrain writes and removes files in its run folder and never through a link. Replace "
        "the link with the folder or file itself (or remove it), then run again.\n"
    )
    assert tree(outside.parent) == kept
    (run / linked).unlink()
    outside.rename(run / linked)
    assert learn(tmp_path, "run.yaml", "--resume").returncode == 0  # the link was all it was


def test_resume_leaves_wandbs_own_links_alone(tmp_path: Path) -> None:
    options = config(tmp_path, max_steps=128, summary_freq=128, checkpoint_interval=128)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    assert learn(tmp_path, "run.yaml").returncode == 0
    wandb = tmp_path / "results" / "run" / "wandb"
    (wandb / "offline-run-1").mkdir(parents=True)
    (wandb / "latest-run").symlink_to("offline-run-1", target_is_directory=True)
    options["behaviors"]["CartPole"]["max_steps"] = 256
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    resumed = learn(tmp_path, "run.yaml", "--resume")
    assert resumed.returncode == 0, resumed.stderr
