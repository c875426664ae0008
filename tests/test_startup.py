"""What a run loads before its first step, and what it leaves to the threads that need it.

(TensorBoard's protobufs are imported by the TensorBoard writer on its own thread, which may
happen before or after the first step.)"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.helpers import clean_env, config, python
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
    loaded = set(json.loads(probe.read_text()))
    assert {"torch", "gymnasium", "evtrain.run.learn"} <= loaded  # the probe saw the run
    assert [m for m in NOT_BEFORE_THE_FIRST_STEP if m in loaded] == []
    # ... and the run did export, so the exporter was loaded after the first step.
    run = tmp_path / "results" / "run"
    assert (run / "CartPole.onnx").exists() and (run / "CartPole" / "CartPole-128.onnx").exists()
