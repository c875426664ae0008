"""``threaded: true``: the update on its own thread, the environments acting with the networks of
before it (see :mod:`evtrain.trainers.threaded`)."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from evtrain.trainers import PPOSettings, SACSettings
from evtrain.trainers.algorithm import OnPolicyBatch
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from evtrain.trainers.threaded import UpdateThread
from tests.trainers.helpers import Recording, make_envs, small_ppo, small_sac


def ppo(recording: Recording, *, seed: int = 0, **overrides: Any) -> PPOTrainer:
    # No summary before max_steps: a summary waits for the update in flight.
    settings = small_ppo(threaded=True, summary_freq=10**6, **overrides)
    envs = make_envs("CartPole-v1", 2)
    return PPOTrainer("CartPole", settings, envs, recording.reporter, seed=seed)


@torch.no_grad()
def rollout_logprobs(
    agent: ActorCritic | RecurrentActorCritic, trainer: PPOTrainer
) -> torch.Tensor:
    """log pi(a_t|s_t) of the last rollout's actions under ``agent``, step by step (the batch
    shapes the rollout acted with, so equal weights give equal bits)."""
    assert isinstance(agent, ActorCritic)  # a feed-forward one
    rows = [
        agent.evaluate(x, a, entropy=False)[0]
        for x, a in zip(trainer.b_obs, trainer.b_actions, strict=True)
    ]
    return torch.stack(rows)


def test_ppo_rollout_acts_with_the_agent_of_before_the_update_in_flight(
    recording: Recording,
) -> None:
    trainer = ppo(recording, hyperparameters=PPOSettings(batch_size=32, buffer_size=64))
    assert trainer._acting is not None
    theta0 = copy.deepcopy(trainer.agent)
    trainer.advance()  # rollout 0 with theta0; update 0 starts on the update thread
    assert torch.equal(trainer.b_logprobs, rollout_logprobs(theta0, trainer))
    trainer.advance()  # rollout 1 while update 0 runs: theta0 still acts
    assert torch.equal(trainer.b_logprobs, rollout_logprobs(theta0, trainer))
    # Update 0 was waited for before rollout 1's values: theta1 acts next, while update 1 runs.
    theta1 = copy.deepcopy(trainer._acting.module)
    assert not torch.equal(trainer.b_logprobs, rollout_logprobs(theta1, trainer))
    trainer.advance()
    assert torch.equal(trainer.b_logprobs, rollout_logprobs(theta1, trainer))
    trainer.wait_for_update()
    for acting, trained in zip(
        trainer._acting.module.parameters(), trainer.agent.parameters(), strict=True
    ):
        assert torch.equal(acting, trained)
    trainer.close()


def test_ppo_threaded_runs_are_reproducible_and_count_as_unthreaded(
    recording: Recording,
) -> None:
    def run(threaded: bool) -> PPOTrainer:
        settings = small_ppo(threaded=threaded, max_steps=640, summary_freq=256)
        settings.network_settings.normalize = True
        trainer = PPOTrainer(
            "CartPole", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=4
        )
        while not trainer.should_stop:
            trainer.advance()
        trainer.write_final_summary()
        trainer.close()
        return trainer

    first, second, unthreaded = run(True), run(True), run(False)
    for a, b in zip(first.agent.parameters(), second.agent.parameters(), strict=True):
        assert torch.equal(a, b)
    # 10 rollouts of 64 steps, each updated: 2 epochs x 2 minibatches
    assert first.step == unthreaded.step == 640
    first_steps = first.algorithm.optimizer.step_count
    assert int(first_steps) == int(unthreaded.algorithm.optimizer.step_count) == 40
    # every observation went into the normaliser (2 environments x 320 steps)
    assert float(first.agent.normalizer.count) == float(unthreaded.agent.normalizer.count) == 640
    # a threaded run is not the unthreaded one: acting lags by one update
    assert not torch.equal(first.algorithm.flat_params, unthreaded.algorithm.flat_params)
    recording.flush()
    labels = [e.step for e in recording.stats]
    assert labels == [256, 512, 640] * 3


class RecordingSAC(SACTrainer):
    """SAC that records the actor's weights as each batch of gradient steps is handed over."""

    def _setup(self) -> None:
        super()._setup()
        self.batches: list[tuple[int, torch.Tensor]] = []

    def _run_update(self, update: Callable[..., None], *args: Any) -> None:
        self.batches.append((args[0], self.actor_params.detach().clone()))
        super()._run_update(update, *args)


def test_sac_acts_with_the_actor_of_before_the_gradient_steps_in_flight(
    recording: Recording,
) -> None:
    hyperparameters = SACSettings(
        batch_size=32, buffer_size=1000, buffer_init_steps=100, steps_per_update=1.5
    )
    settings = small_sac(
        threaded=True, max_steps=300, summary_freq=10**6, hyperparameters=hyperparameters
    )
    trainer = RecordingSAC(
        "Pendulum", settings, make_envs("Pendulum-v1", 2), recording.reporter, seed=2
    )
    assert trainer._acting is not None
    acting = trainer._acting.module.actor
    while not trainer.should_stop:
        trainer.advance()
        if trainer.step > 104:  # learning: a batch runs now, acting has its starting weights
            started = trainer.batches[-1][1]
            assert torch.equal(torch.cat([p.reshape(-1) for p in acting.parameters()]), started)
    trainer.write_final_summary()
    # int((300 - 100) / 1.5) gradient steps, as unthreaded: 1 or 2 per step of 2 environments
    assert trainer.num_updates == int(trainer.q_optimizer.step_count) == 133
    assert sum(count for count, _ in trainer.batches) == 133
    assert {count for count, _ in trainer.batches} == {1, 2}
    assert not torch.equal(trainer.batches[-1][1], trainer.batches[-2][1])
    # every transition stored, every observation normalised, once the updates were done
    assert len(trainer.replay) == 300
    trainer.close()


def test_sac_threaded_counts_as_unthreaded(recording: Recording) -> None:
    def run(threaded: bool) -> SACTrainer:
        settings = small_sac(threaded=threaded, max_steps=240, summary_freq=100)
        settings.network_settings.normalize = True
        trainer = SACTrainer(
            "Pendulum", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3
        )
        while not trainer.should_stop:
            trainer.advance()
        trainer.write_final_summary()
        trainer.close()
        return trainer

    threaded, again, unthreaded = run(True), run(True), run(False)
    assert torch.equal(threaded.actor_params, again.actor_params)
    assert torch.equal(threaded.qf_params, again.qf_params)
    assert threaded.num_updates == unthreaded.num_updates == 140
    assert int(threaded.actor_optimizer.step_count) == 140
    assert float(threaded.normalizer.count) == float(unthreaded.normalizer.count) == 240
    assert len(threaded.replay) == len(unthreaded.replay) == 240
    # the warm-up's random actions are the same draws: the first 100 transitions are equal
    assert (threaded.replay.actions[:100] == unthreaded.replay.actions[:100]).all()
    recording.flush()
    assert [e.step for e in recording.stats] == [100, 200, 240] * 3
    [mean_q] = {e.values["Losses/Q1 Loss"].num for e in recording.stats if e.step == 200}
    assert mean_q == 1  # one mean per summary period, of the updates of that period


class FailingPPO(PPOTrainer):
    def _update(self, batch: OnPolicyBatch) -> None:
        self.updates = getattr(self, "updates", 0) + 1
        if self.updates == 2:
            raise RuntimeError("update 2 failed on purpose")
        super()._update(batch)


def test_an_error_in_the_update_is_raised_on_the_training_thread_once(
    recording: Recording,
) -> None:
    settings = small_ppo(threaded=True, summary_freq=10**6)
    trainer = FailingPPO(
        "CartPole", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=0
    )
    trainer.advance()
    trainer.advance()  # update 2 starts, and fails on the update thread
    with pytest.raises(RuntimeError, match="update 2 failed on purpose") as raised:
        trainer.advance()  # raised where the next rollout waits for it
    assert getattr(raised.value, "__notes__", None) == [
        "(raised by the update of behavior 'CartPole' on its own thread, threaded: true)"
    ]
    trainer.wait_for_update()  # raised once
    trainer.close()


def test_close_logs_an_error_nobody_waited_for(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    settings = small_ppo(threaded=True, summary_freq=10**6)
    trainer = FailingPPO(
        "CartPole", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=0
    )
    trainer.advance()
    trainer.advance()
    with caplog.at_level(logging.ERROR, logger="evtrain"):
        trainer.close()
    assert caplog.messages == ["The update of CartPole failed while the run was ending"]
    assert "update 2 failed on purpose" in caplog.text
    assert not [t for t in threading.enumerate() if t.name == "evtrain-update[CartPole]"]


def test_a_loaded_checkpoint_acts_at_once(recording: Recording) -> None:
    trained = ppo(recording, seed=1)
    for _ in range(3):
        trained.advance()
    state = trained.state_dict()  # waits for the update in flight
    assert "act_generator" in state
    fresh = ppo(recording, seed=2)
    fresh.load_state_dict(state)
    assert fresh._acting is not None
    for acting, loaded in zip(
        fresh._acting.module.parameters(), trained.agent.parameters(), strict=True
    ):
        assert torch.equal(acting, loaded)
    assert torch.equal(fresh.act_generator.get_state(), trained.act_generator.get_state())
    trained.close()
    fresh.close()


def test_unthreaded_trainers_start_no_thread_and_act_with_the_generator(
    recording: Recording,
) -> None:
    trainer = PPOTrainer(
        "CartPole", small_ppo(), make_envs("CartPole-v1", 2), recording.reporter, seed=0
    )
    assert trainer.act_generator is trainer.generator and trainer._acting is None
    trainer.advance()
    assert "act_generator" not in trainer.state_dict()
    assert not [t for t in threading.enumerate() if t.name.startswith("evtrain-update")]


def test_update_thread_runs_one_update_at_a_time() -> None:
    updates = UpdateThread("evtrain-update[T]", "T")
    assert updates.wait() is False  # nothing ran
    gate = threading.Event()

    def update() -> None:
        gate.wait(10)

    updates.start(update)
    assert updates.busy
    with pytest.raises(RuntimeError, match=r"evtrain-update\[T\]: an update is still running"):
        updates.start(lambda: None)
    gate.set()
    assert updates.wait() is True and not updates.busy
    updates.close()
    with pytest.raises(RuntimeError, match=r"evtrain-update\[T\] is closed"):
        updates.start(lambda: None)


class GatedPPO(PPOTrainer):
    """PPO whose updates wait for :attr:`gate` before they start."""

    def _setup(self) -> None:
        super()._setup()
        self.gate = threading.Event()

    def _update(self, batch: OnPolicyBatch) -> None:
        assert self.gate.wait(10)
        super()._update(batch)


def test_state_dict_waits_for_the_update_in_flight(recording: Recording) -> None:
    settings = small_ppo(threaded=True, summary_freq=10**6)
    trainer = GatedPPO(
        "CartPole", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=0
    )
    trainer.advance()  # the update waits at the gate
    assert int(trainer.algorithm.optimizer.step_count) == 0
    opener = threading.Timer(0.2, trainer.gate.set)
    opener.start()
    state = trainer.state_dict()
    opener.join()
    # 2 epochs x 2 minibatches, and the acting copy caught up with them
    assert int(state["optimizer"]["state"][0]["step"]) == 4
    assert trainer._acting is not None
    for acting, trained in zip(
        trainer._acting.module.parameters(), trainer.agent.parameters(), strict=True
    ):
        assert torch.equal(acting, trained)
    trainer.close()
