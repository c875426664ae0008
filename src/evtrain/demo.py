"""``evtrain demo``: a synthetic run that exercises the bus and the default writers.

No model is trained: a seeded random walk stands in for a learning curve, so the demo needs no
environment and finishes in seconds.  Everything else is real — the options, the plugins, the
bus, the TensorBoard files and ``timers.json`` — so it shows where a run's outputs land.
"""

from __future__ import annotations

import logging
import random
import time

from evtrain.bus.reporter import StatsReporter
from evtrain.config.options import RunOptions
from evtrain.events import signals
from evtrain.events.payloads import RunFinished, RunStarted, RunStatus
from evtrain.events.stats import CUMULATIVE_REWARD, StatsAggregationMethod, StatsPropertyType
from evtrain.run.wiring import attach_plugins, make_bus

logger = logging.getLogger("evtrain")

BEHAVIOR = "Demo"


def run_demo(options: RunOptions, *, steps: int = 50_000, summary_freq: int = 1_000) -> None:
    """Emit a synthetic run of ``steps`` steps through the plugins' writers."""
    rng = random.Random(0)
    with make_bus(options) as bus:
        attach_plugins(options, bus)
        run_id = options.checkpoint_settings.run_id
        bus.emit(signals.run_started, RunStarted(run_id=run_id, options=options.as_dict()))
        reporter = StatsReporter(bus, BEHAVIOR)
        reporter.add_property(
            StatsPropertyType.HYPERPARAMETERS,
            {"trainer_type": "demo", "hyperparameters": {"learning_rate": 3e-4}},
        )
        skill = 0.0
        for step in range(summary_freq, steps + 1, summary_freq):
            skill += (1.0 - skill) * 0.08
            for _ in range(5):
                reward = 500.0 * skill + rng.gauss(0.0, 25.0)
                reporter.add_stat(CUMULATIVE_REWARD, reward, StatsAggregationMethod.HISTOGRAM)
                reporter.add_stat("Environment/Episode Length", max(1.0, reward))
            reporter.add_stat("Losses/Policy Loss", rng.gauss(0.0, 0.01))
            reporter.add_stat("Losses/Value Loss", 10.0 * (1.0 - skill) + abs(rng.gauss(0, 1)))
            reporter.add_stat("Policy/Learning Rate", 3e-4 * (1 - step / steps))
            reporter.add_stat("Is Training", 1.0)
            reporter.set_stat("Step", step)
            reporter.write_stats(step)
            time.sleep(0.002)  # a real trainer spends its time between summaries
        bus.emit(
            signals.run_finished,
            RunFinished(run_id=run_id, status=RunStatus.COMPLETED, steps=steps),
        )
    write_path = options.checkpoint_settings.write_path
    print(f"TensorBoard files: {write_path / BEHAVIOR}")
    print(f"Run logs:          {options.checkpoint_settings.run_logs_dir / 'timers.json'}")
    print(f"View with:         tensorboard --logdir {options.checkpoint_settings.results_dir}")
