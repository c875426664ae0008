"""``begin_inference`` / ``run_policy``: the policy runs through the trainer's own bookkeeping."""

from __future__ import annotations

import copy

import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain.trainers import PPOTrainer
from tests.trainers.helpers import Recording, counting_envs, small_ppo


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_run_policy_counts_from_zero_and_reports_without_training(
    recording: Recording, mode: AutoresetMode
) -> None:
    trainer = PPOTrainer(
        "Test",
        small_ppo(max_steps=12, summary_freq=6),
        counting_envs(mode, 2),
        recording.reporter,
        seed=0,
    )
    trainer.advance()  # a trained step count, which inference does not continue
    weights = copy.deepcopy(trainer.agent.state_dict())
    recording.flush()
    recording.stats.clear()

    trainer.begin_inference()
    assert trainer.step == 0
    while not trainer.should_stop:
        trainer.run_policy()
    trainer.write_final_summary()
    recording.flush()

    assert trainer.step == 12
    assert [e.step for e in recording.stats] == [6, 12]
    for event in recording.stats:
        assert event.values["Is Training"].aggregated_value == 0.0
    # Episodes of 3 steps, reward 1 each; NEXT_STEP's reset steps count for nothing.
    returns = [
        r for e in recording.stats for r in e.values["Environment/Cumulative Reward"].full_dist
    ]
    assert returns and set(returns) == {3.0}
    for key, value in weights.items():
        assert torch.equal(trainer.agent.state_dict()[key], value), key


def test_run_policy_needs_begin_inference(recording: Recording) -> None:
    trainer = PPOTrainer(
        "Test", small_ppo(), counting_envs(AutoresetMode.SAME_STEP), recording.reporter, seed=0
    )
    with pytest.raises(RuntimeError, match=r"call it first"):
        trainer.run_policy()
