"""A tracker writer configured without its library installed: a config error naming the extra
to install (the library is hidden from import here; the writers import it only when asked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evtrain import ConfigError, RunOptions
from evtrain.extras import install_hint
from evtrain_writers.mlflow_writer import get_mlflow_writers
from evtrain_writers.prometheus_writer import get_prometheus_writers
from evtrain_writers.wandb_writer import get_wandb_writers


@pytest.mark.parametrize(
    ("name", "register", "package"),
    [
        ("mlflow", get_mlflow_writers, "mlflow"),
        ("wandb", get_wandb_writers, "wandb"),
        ("prometheus", get_prometheus_writers, "prometheus_client"),
    ],
)
def test_a_configured_tracker_whose_library_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, register: object, package: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # `import package` raises ImportError
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"run_id": "r", "results_dir": str(tmp_path)},
            "writers": {name: {}},
        }
    )
    with pytest.raises(ConfigError) as info:
        register(options)  # type: ignore[operator]
    (problem,) = info.value.problems
    assert problem.startswith(f"writers.{name}: needs the {package} package: {install_hint(name)}")
