"""What a run loads before its first step, and what it leaves to the threads that need it.

(TensorBoard's protobufs are imported by the TensorBoard writer on its own thread, which may
happen before or after the first step.)  And the imports ran without the cyclic garbage
collector, which collects again, past what they made, once the run steps."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import yaml

from tests.helpers import clean_env, config, python, run_cli, run_evtrain
from tests.probe_envs import PROBE_FILE

REPO = Path(__file__).parent.parent

NOT_BEFORE_THE_FIRST_STEP = (
    "onnx",  # the exporters and the export check: on the saver's thread, at the first save
    "onnxscript",
    "onnxruntime",
    "torch._dynamo",  # torch.optim imports it; evtrain's FlatAdam does not need it
    "torch.onnx._internal.exporter",
    "mlflow",  # trackers only when configured
    "wandb",
    "prometheus_client",
)


def test_the_first_step_comes_before_the_exporters_and_what_no_one_asked_for(
    tmp_path: Path,
) -> None:
    options = config(tmp_path, max_steps=256, checkpoint_interval=128, keep_checkpoints=2)
    options["env_settings"]["env_id"] = "tests.probe_envs:first_step_probe"
    (tmp_path / "probe.yaml").write_text(yaml.safe_dump(options))
    probe = tmp_path / "modules.json"
    env = clean_env(**{PROBE_FILE: str(probe), "PYTHONPATH": str(REPO)})
    result = python("-m", "evtrain", "learn", "probe.yaml", cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    record = json.loads(probe.read_text())
    loaded = set(record["modules"])
    assert {"torch", "gymnasium", "evtrain.run.learn"} <= loaded  # the probe saw the run
    assert [m for m in NOT_BEFORE_THE_FIRST_STEP if m in loaded] == []
    # The imports ran without the cyclic garbage collector (evtrain.cli.startup): what they
    # made is frozen out of its reach, and it collects again for the run.
    assert record["collector_enabled"] is True
    assert record["frozen"] > 100_000
    # ... and the run did export, so the exporter was loaded after the first step.
    run = tmp_path / "results" / "run"
    assert (run / "CartPole.onnx").exists() and (run / "CartPole" / "CartPole-128.onnx").exists()


def test_main_called_from_python_leaves_the_callers_collector_as_it_was(tmp_path: Path) -> None:
    """Only the ``evtrain`` process's own start-up pauses the collector (``entry``); a caller of
    ``main`` keeps its own collector's state, on or off, and nothing of it is frozen.

    (The caller's own object stays in the collector's generations, where a freeze would have
    moved it out; the count of frozen objects may fall meanwhile, as frozen objects that lose
    their last reference are freed, but never grows.)"""
    mine: list[list[int]] = [[]]  # tracked by the collector
    frozen = gc.get_freeze_count()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(tmp_path, max_steps=128)))
    assert run_cli("run.yaml", cwd=tmp_path).returncode == 0
    assert gc.isenabled()
    assert _collectable(mine) and gc.get_freeze_count() <= frozen
    gc.disable()
    try:
        assert run_evtrain("plugins", cwd=tmp_path).returncode == 0
        assert not gc.isenabled()
        assert _collectable(mine) and gc.get_freeze_count() <= frozen
    finally:
        gc.enable()


def _collectable(thing: object) -> bool:
    """``thing`` is in one of the collector's generations (``gc.freeze`` moves objects out)."""
    return any(candidate is thing for candidate in gc.get_objects())
