"""A subscriber asks the run to stop: ``Bus.request_stop`` ends it at the next turn boundary,
with its final save and export, status ``stopped`` and the reason in ``run_finished``."""

from __future__ import annotations

import threading
from pathlib import Path

import onnxruntime  # type: ignore[import-untyped]  # ships no type information

from evtrain import Bus, RunFinished, RunStatus, StatsEvent, signals
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import config


def test_a_subscriber_stops_the_run_with_a_final_save_and_export(tmp_path: Path) -> None:
    with Bus() as bus:
        finished = Recorder()
        bus.connect(signals.run_finished, finished)

        def stop_after_the_first_summary(event: StatsEvent) -> None:
            bus.request_stop(f"enough at step {event.step}", by="test")

        bus.connect(signals.stats, stop_after_the_first_summary)
        result = learn(config(tmp_path, max_steps=100_000), bus)
        bus.flush()
    assert result.status is RunStatus.STOPPED
    assert result.stop_reason == "enough at step 256"
    # Stopped at a turn boundary soon after the request, far before max_steps.
    assert 256 <= result.steps["CartPole"] < 100_000
    (event,) = finished.of(RunFinished)
    assert (event.status, event.reason) == (RunStatus.STOPPED, "enough at step 256")
    onnxruntime.InferenceSession(str(result.models["CartPole"]))
    # The request was taken by the run: a second run on the same bus is not stopped by it.
    assert bus.stop_request is None


def test_the_first_request_wins_from_any_thread() -> None:
    with Bus() as bus:
        threads = [
            threading.Thread(target=bus.request_stop, args=(f"reason {i}",), kwargs={"by": str(i)})
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        request = bus.stop_request
        assert request is not None and request.reason == f"reason {request.by}"
        assert bus.take_stop_request() is request
        assert bus.stop_request is None
