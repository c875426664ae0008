"""``env_settings.spare_copies``: a build whose agent appears after the first step (the stand-in
``mixed`` scene's fifth agent, enabled at step 3) fails in one line without room for it, and
trains with one spare copy of the slots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import free_port, run_cli
from tests.standin import make_build

MIXED: dict[str, Any] = {
    "trainer_type": "ppo",
    "hyperparameters": {"batch_size": 32, "buffer_size": 128, "num_epoch": 1},
    "network_settings": {"hidden_units": 16, "num_layers": 1, "vis_encode_type": "fully_connected"},
    "max_steps": 256,
    "summary_freq": 128,
}


def _config(tmp_path: Path, **env_settings: Any) -> None:
    build = make_build(tmp_path / "builds", "mixed", "Mixed")
    data = {
        "behaviors": {"Mixed": MIXED},
        "env_settings": {"env_path": str(build), "base_port": free_port(), **env_settings},
        "checkpoint_settings": {"run_id": "mixed", "results_dir": str(tmp_path / "results")},
    }
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(data))


def test_an_agent_that_appears_later_needs_a_spare_copy_and_trains_with_one(
    tmp_path: Path,
) -> None:
    _config(tmp_path)
    result = run_cli("mixed.yaml", "--no-graphics", cwd=tmp_path)
    assert result.returncode == 1
    line = result.stderr.splitlines()[-1]
    assert "agent 5 appeared in Unity instance 0, where all 2 x 2 slots" in line, result.stderr
    assert line.endswith("(env_settings.spare_copies)"), line

    _config(tmp_path, spare_copies=1)
    result = run_cli("mixed.yaml", "--no-graphics", "--force", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "results/mixed/Mixed.onnx").exists()
