"""``behaviors.<name>.evaluation``: evaluations at every multiple of ``every`` with the
deterministic policy and the normaliser of that step, emitted as ``evaluation`` events; the
best model kept beside the last (``save``/``export`` with ``best=True``) and kept by
``--resume``; clear errors for bad settings."""

from __future__ import annotations

import gc
import json
from multiprocessing.queues import SimpleQueue
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest

from evtrain import (
    ArtifactEvent,
    Bus,
    ConfigError,
    EvaluationEvent,
    ExportEvent,
    RunOptions,
    RunStatus,
    SaveEvent,
    StatsEvent,
    signals,
)
from evtrain.evaluation.settings import EvaluationSettings
from evtrain.run.evaluation.evaluator import _context
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import config, tensorboard_scalars

EVALUATION = {"every": 256, "episodes": 3, "num_envs": 2, "seed": 5}


def evaluated_run(tmp_path: Path, max_steps: int, **behavior: Any) -> Recorder:
    """A tiny CartPole PPO run with a normaliser, evaluated every 256 steps (3 episodes)."""
    settings = {
        "evaluation": EVALUATION,
        "network_settings": {"hidden_units": 32, "normalize": True},
    }
    options = config(tmp_path, max_steps=max_steps, **{**settings, **behavior})
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    return recorder


def onnx_returns(path: Path, episodes: int, seed: int) -> list[float]:
    """The return of each of ``episodes`` CartPole episodes of the exported policy at
    ``path``, episode ``i`` reset with ``seed + i``, run in onnxruntime."""
    session = onnxruntime.InferenceSession(str(path))
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            (action,) = session.run(["action"], {"obs": obs[None].astype(np.float32)})
            obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return returns


def best_saves(recorder: Recorder) -> list[SaveEvent | ExportEvent]:
    return [e for e in recorder.events if isinstance(e, (SaveEvent, ExportEvent)) and e.best]


def test_evaluations_at_every_multiple_and_the_best_model_beside_the_last(
    tmp_path: Path,
) -> None:
    recorder = evaluated_run(tmp_path, 1024)
    evaluations = recorder.of(EvaluationEvent)
    assert [e.step for e in evaluations] == [256, 512, 768, 1024]
    for event in evaluations:
        assert (event.category, event.deterministic) == ("CartPole", True)
        assert len(event.returns) == len(event.lengths) == 3
        assert list(event.returns) == [float(n) for n in event.lengths]  # CartPole: 1 a step
    # The best model is replaced exactly when an evaluation beats the best so far.
    improved, best = [], float("-inf")
    for event in evaluations:
        if event.mean_return > best:
            improved.append(event)
            best = event.mean_return
    run = tmp_path / "results" / "run"
    expected: list[tuple[str, int, Path]] = []
    for event in improved:
        expected.append(("SaveEvent", event.step, run / "CartPole" / "best.pt"))
        expected.append(("ExportEvent", event.step, run / "CartPole-best.onnx"))
    assert [(type(e).__name__, e.step, e.path) for e in best_saves(recorder)] == expected
    rewards = [e.reward for e in best_saves(recorder) if isinstance(e, SaveEvent)]
    assert rewards == [pytest.approx(e.mean_return) for e in improved]
    # Every writer records it as the stats of its step (TensorBoard here).
    scalars = tensorboard_scalars(run / "CartPole", "Evaluation/Mean Return")
    assert [step for step, _ in scalars] == [e.step for e in evaluations]
    assert [value for _, value in scalars] == pytest.approx([e.mean_return for e in evaluations])
    record = json.loads((run / "CartPole" / "best.json").read_text())
    assert record == {
        "step": improved[-1].step,
        "mean_return": improved[-1].mean_return,
        "episodes": 3,
        "checkpoint": str(run / "CartPole" / "best.pt"),
        "model": str(run / "CartPole-best.onnx"),
        "best_by": "Mean Return",
        "value": improved[-1].mean_return,
    }


def test_evaluation_returns_equal_a_rollout_of_the_exported_onnx(tmp_path: Path) -> None:
    """With ``normalize: true`` the evaluation acts with the normaliser of its step: its
    returns are those of the ONNX exported at that step, which carries it, replayed here in
    onnxruntime with the same seeds (the final model is of the last evaluation's step, the
    best model of the best one's)."""
    recorder = evaluated_run(tmp_path, 768)
    evaluations = {e.step: e for e in recorder.of(EvaluationEvent)}
    run = tmp_path / "results" / "run"
    final = onnx_returns(run / "CartPole.onnx", 3, seed=5)
    assert final == list(evaluations[768].returns)
    best_step = json.loads((run / "CartPole" / "best.json").read_text())["step"]
    best = onnx_returns(run / "CartPole-best.onnx", 3, seed=5)
    assert best == list(evaluations[best_step].returns)


def test_resume_keeps_the_best_so_far(tmp_path: Path) -> None:
    evaluated_run(tmp_path, 512)
    record_path = tmp_path / "results" / "run" / "CartPole" / "best.json"
    record = json.loads(record_path.read_text())
    # A best of 500, CartPole's most, which no evaluation can beat: the resumed run keeps it.
    record["mean_return"] = 500.0
    record_path.write_text(json.dumps(record))
    options = config(
        tmp_path,
        max_steps=1024,
        evaluation=EVALUATION,
        network_settings={"hidden_units": 32, "normalize": True},
    )
    options["checkpoint_settings"]["resume"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    assert [e.step for e in recorder.of(EvaluationEvent)] == [768, 1024]
    assert best_saves(recorder) == []
    assert json.loads(record_path.read_text()) == record


def test_without_best_model_and_with_env_kwargs_of_its_own(tmp_path: Path) -> None:
    """``env_kwargs`` over the training ones: CartPole's Sutton-Barto reward (0 a step, -1 at
    the fall) in the evaluation only."""
    evaluation = {**EVALUATION, "best_model": False, "env_kwargs": {"sutton_barto_reward": True}}
    recorder = evaluated_run(tmp_path, 256, evaluation=evaluation)
    (event,) = recorder.of(EvaluationEvent)
    assert event.step == 256
    assert all(r in (0.0, -1.0) for r in event.returns)
    assert best_saves(recorder) == []
    assert not (tmp_path / "results" / "run" / "CartPole-best.onnx").exists()


def test_each_multiple_is_evaluated_when_evaluations_outlast_a_turn(tmp_path: Path) -> None:
    """Due after every turn (128 steps), each before the last has ended: training waits for
    the one in flight, so none is skipped."""
    recorder = evaluated_run(tmp_path, 1024, evaluation={**EVALUATION, "every": 128})
    assert [e.step for e in recorder.of(EvaluationEvent)] == list(range(128, 1025, 128))


def test_the_defaults() -> None:
    options = RunOptions.from_dict({"behaviors": {"A": {"evaluation": {"every": 1000}}}})
    assert options.behaviors["A"].evaluation == EvaluationSettings(
        every=1000, episodes=10, num_envs=8, seed=0, best_model=True, env_kwargs={}
    )
    few = RunOptions.from_dict({"behaviors": {"A": {"evaluation": {"every": 9, "episodes": 3}}}})
    assert few.behaviors["A"].evaluation is not None
    assert few.behaviors["A"].evaluation.num_envs == 3
    assert RunOptions.from_dict({"behaviors": {"A": {}}}).behaviors["A"].evaluation is None


def test_videos_of_the_recorded_episodes_are_artifacts(tmp_path: Path) -> None:
    """``evaluation.video``: the first episode of every second evaluation, rendered in the
    worker, written as a GIF and announced as an ``artifact`` at the evaluation's step."""
    from PIL import Image

    video = {"episodes": 1, "every": 2, "max_frames": 12}
    recorder = evaluated_run(tmp_path, 768, evaluation={**EVALUATION, "video": video})
    assert [e.step for e in recorder.of(EvaluationEvent)] == [256, 512, 768]
    folder = tmp_path / "results" / "run" / "CartPole" / "videos"
    artifacts = recorder.of(ArtifactEvent)
    assert [(a.category, a.step, a.path, a.kind, a.media_type) for a in artifacts] == [
        ("CartPole", step, folder / f"CartPole-{step}-episode-0.gif", "video", "image/gif")
        for step in (256, 768)
    ]
    for artifact in artifacts:
        with Image.open(artifact.path) as gif:
            assert (gif.format, gif.size) == ("GIF", (600, 400))
            assert 2 <= gif.n_frames <= 12


@pytest.mark.parametrize(
    ("evaluation", "problem"),
    [
        ({"episodes": 3}, "behaviors.CartPole.evaluation.every: required key is missing"),
        ({"every": 0}, "behaviors.CartPole.evaluation.every: must be > 0, got 0"),
        ({"every": 10, "episodes": 0}, "behaviors.CartPole.evaluation.episodes: must be > 0"),
        ({"every": 10, "frequency": 3}, "behaviors.CartPole.evaluation.frequency: unknown key"),
    ],
)
def test_bad_evaluation_settings_name_the_key(evaluation: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        RunOptions.from_dict({"behaviors": {"CartPole": {"evaluation": evaluation}}})
    assert problem in str(error.value)


def test_a_pettingzoo_environment_without_opponents_is_refused_before_training(
    tmp_path: Path,
) -> None:
    """(Evaluations against opponents: tests/test_evaluation_opponents.py.)"""
    options = config(tmp_path, evaluation={"every": 512})
    options["behaviors"] = {"agent": options["behaviors"]["CartPole"]}
    options["env_settings"]["env_id"] = "mpe2.simple_spread_v3:parallel_env"
    with pytest.raises(ConfigError) as error:
        learn(options)
    assert "behaviors.agent.evaluation.opponents: required for a PettingZoo" in str(error.value)


def test_evaluation_environments_that_cannot_be_built_fail_the_run_naming_the_key(
    tmp_path: Path,
) -> None:
    options = config(tmp_path, evaluation={"every": 512, "env_kwargs": {"gravity_x": 1}})
    with pytest.raises(ConfigError) as error:
        learn(options)
    (problem,) = error.value.problems
    assert problem.startswith(
        "behaviors.CartPole.evaluation: the evaluation environments could not be built: "
        "env_settings.env_kwargs: "
    )
    assert "gravity_x" in problem
    assert problem.endswith(
        "(check behaviors.CartPole.evaluation.env_kwargs over env_settings.env_kwargs)"
    )


def test_an_inference_run_does_not_evaluate(tmp_path: Path) -> None:
    evaluated_run(tmp_path, 512)
    settings: dict[str, Any] = {
        "evaluation": EVALUATION,
        "network_settings": {"hidden_units": 32, "normalize": True},
    }
    options = config(tmp_path, max_steps=512, **settings)
    options["checkpoint_settings"]["inference"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    assert recorder.of(StatsEvent) != []
    assert recorder.of(EvaluationEvent) == []


def test_a_stopped_run_waits_for_the_evaluation_in_flight(tmp_path: Path) -> None:
    """A subscriber stops the run on the first evaluation: the one started after the last
    turn is still emitted, before the final save."""
    settings: dict[str, Any] = {"evaluation": {**EVALUATION, "every": 128}, "max_steps": 100_000}
    with Bus() as bus:
        recorder = Recorder()
        recorder.connect(bus)
        bus.connect(signals.evaluation, lambda e: bus.request_stop(f"evaluated at {e.step}"))
        result = learn(config(tmp_path, **settings), bus)
        bus.flush()
    assert result.status is RunStatus.STOPPED
    final = result.steps["CartPole"]
    assert [e.step for e in recorder.of(EvaluationEvent)] == list(range(128, final + 1, 128))


def test_videos_are_stored_once_and_only_the_newest_keep_stay(tmp_path: Path) -> None:
    """``video.keep: 2``: every evaluation is recorded and announced, the folder keeps the two
    newest files; TensorBoard names each file, its event file holds no video."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    video = {"episodes": 1, "every": 1, "max_frames": 8, "keep": 2}
    recorder = evaluated_run(tmp_path, 1024, evaluation={**EVALUATION, "video": video})
    steps = [256, 512, 768, 1024]
    assert [a.step for a in recorder.of(ArtifactEvent)] == steps
    folder = tmp_path / "results" / "run" / "CartPole"
    assert sorted(p.name for p in (folder / "videos").iterdir()) == [
        "CartPole-1024-episode-0.gif",
        "CartPole-768-episode-0.gif",
    ]
    accumulator = EventAccumulator(str(folder), size_guidance={"images": 0, "tensors": 0})
    accumulator.Reload()
    assert accumulator.Tags()["images"] == []
    texts = accumulator.Tensors("Evaluation/Video")
    assert [t.step for t in texts] == steps


def _put_freeze_count(queue: SimpleQueue[int]) -> None:
    queue.put(gc.get_freeze_count())


def test_the_evaluation_workers_start_from_frozen_objects() -> None:
    """The forkserver the workers fork from froze what it preloaded (torch's objects), so that
    it exits, after the run, without walking them; a worker inherits them frozen."""
    context = _context()
    assert context.get_start_method() == "forkserver"  # Linux's
    queue = context.SimpleQueue()
    worker = context.Process(target=_put_freeze_count, args=(queue,))
    worker.start()
    try:
        assert queue.get() > 10_000
    finally:
        worker.join(60)
    assert worker.exitcode == 0
