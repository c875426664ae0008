"""``self_play.random_opponent_ratio``: a share of draws takes an opponent that ignores what it
observes (the policy with its parameters zero), whose games move no rating."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus, ConfigError, RunOptions
from evtrain.trainers.ghost.snapshots import LATEST, RANDOM, blank
from evtrain.trainers.settings import SelfPlaySettings
from tests.self_play_duel import duel, turns
from tests.trainers.helpers import Recording


def test_blank_zeroes_the_parameters_and_keeps_the_buffers() -> None:
    weights = {"w": torch.ones(2, 2), "b": torch.ones(2), "mean": torch.full((2,), 3.0)}
    blanked = blank(weights, {"w", "b"})
    assert torch.count_nonzero(blanked["w"]) == 0 and torch.count_nonzero(blanked["b"]) == 0
    assert torch.equal(blanked["mean"], weights["mean"])
    assert torch.count_nonzero(weights["w"]) == 4  # the policy's own weights untouched


def test_every_draw_random_plays_uniformly_and_moves_no_rating(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(
        recording.reporter, save_steps=64, swap_steps=64, window=4, random_opponent_ratio=1.0
    )
    seat = controller.facing
    assert seat is not None and seat.index == RANDOM
    parameters = dict(seat.opponent.module.named_parameters())
    assert parameters and all(torch.count_nonzero(p) == 0 for p in parameters.values())
    # the learner's own policy is not blanked: it still has weights
    policy = trainer.sampling_policy_module(controller.generator)
    assert any(torch.count_nonzero(p) for p in policy.parameters())
    # uniform over the duel's three numbers, whatever it observes
    seen = np.eye(2, dtype=np.float32)[np.arange(3000) % 2]  # either team
    counts = Counter(int(a) for a in seat.opponent(seen))
    assert sorted(counts) == [0, 1, 2]
    assert all(abs(n / 3000 - 1 / 3) < 0.04 for n in counts.values())
    elo = controller.elo
    turns(trainer, controller, 3)  # games against it, and a draw after each turn
    assert seat.index == RANDOM
    assert controller.elo == pytest.approx(elo)
    assert controller.window.games == [0] * len(controller.window)


def test_a_ratio_between_draws_random_as_often_from_the_controllers_generator(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(
        recording.reporter, save_steps=64, swap_steps=64, window=4, random_opponent_ratio=0.5
    )
    assert controller.facing is not None
    indices = [controller.facing.index]
    for _ in range(6):
        turns(trainer, controller, 1)
        indices.append(controller.facing.index)
    # the random opponent first, then ML-Agents' rule, from the controller's generator
    rng = np.random.default_rng([0, 0x5E1F])
    expected: list[int] = []
    for size in (1, 2, 3, 4, 4, 4, 4):
        if rng.random() < 0.5:
            expected.append(RANDOM)
        else:
            expected.append(LATEST if rng.random() < 0.5 else int(rng.integers(size)))
    assert indices == expected and RANDOM in expected and set(expected) != {RANDOM}


def test_unset_it_is_never_drawn() -> None:
    assert SelfPlaySettings().random_opponent_ratio == 0.0
    options = RunOptions.from_dict({"behaviors": {"P": {"self_play": {}}}})
    assert options.behaviors["P"].self_play == SelfPlaySettings()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (1.5, "behaviors.P.self_play.random_opponent_ratio: must be <= 1.0, got 1.5"),
        (-0.1, "behaviors.P.self_play.random_opponent_ratio: must be >= 0.0, got -0.1"),
    ],
)
def test_a_bad_ratio_is_named_by_its_key(value: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": {"self_play": {"random_opponent_ratio": value}}}})
    assert info.value.problems == (problem,)
