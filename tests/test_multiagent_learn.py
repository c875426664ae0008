"""Trainers on agent slots: a step whose agent did not act is no experience (not stored, not
trained on, not counted, GAE of the real steps untouched); PettingZoo's own environments
(MPE simple_spread, knights_archers_zombies, connect_four) as agent slots."""

from __future__ import annotations

from typing import Any

import numpy as np
import pettingzoo
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from pettingzoo.utils.env_logger import EnvLogger

from evtrain import Bus
from evtrain.multiagent.slots import AgentSlots
from evtrain.trainers import NetworkSettings, PPOSettings, PPOTrainer, SACSettings
from evtrain.trainers.envs import AutoresetTracker
from evtrain.trainers.sac import SACTrainer
from tests.multiagent_envs import walkers
from tests.trainers.helpers import Recording, small_ppo, small_sac

ACTIVE_PER_EPISODE = 2 + 6 + 3
"""Walkers (6 steps): walker_1 acts 2 steps and leaves, walker_0 acts 6, walker_2 appears after
step 3 and acts 3."""


def test_the_active_mask_joins_valid_in_either_autoreset_mode() -> None:
    same = AutoresetTracker(AutoresetMode.SAME_STEP, 3)
    assert not same.masked
    dones = np.array([False, True, False])
    assert same.observe(dones).tolist() == [True, True, True]
    active = np.array([True, False, True])
    assert same.observe(dones, {"active": active}).tolist() == [True, False, True]
    assert same.masked
    assert same.observe(dones, {}).tolist() == [True, False, True]  # no mask: as last time
    following = AutoresetTracker(AutoresetMode.NEXT_STEP, 3)
    following.observe(np.array([True, False, False]))
    assert following.observe(dones, {"active": active}).tolist() == [False, False, True]


def test_ppo_stores_counts_and_reports_only_the_steps_agents_acted(bus: Bus) -> None:
    recording = Recording(bus, "walker")
    slots = AgentSlots([walkers(), walkers()], "walker")
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=12, buffer_size=36, num_epoch=1),
        summary_freq=1000,
    )
    trainer = PPOTrainer("walker", settings, slots, recording.reporter, seed=0)
    assert trainer.num_steps == 6  # 6 slots: one rollout is one episode of each copy
    trainer.advance()
    assert trainer.step == 2 * ACTIVE_PER_EPISODE
    assert trainer.rollout.valid.sum() == 2 * ACTIVE_PER_EPISODE
    assert trainer.rollout.valid[:, :3].T.tolist() == [
        [True] * 6,
        [True, True, False, False, False, False],
        [False, False, False, True, True, True],
    ]
    trainer.write_final_summary()
    recording.flush()
    (event,) = recording.stats
    lengths = event.values["Environment/Episode Length"].full_dist
    assert sorted(lengths) == [2.0, 2.0, 3.0, 3.0, 6.0, 6.0]
    slots.close()


def test_the_observation_normalisers_count_only_the_agents_that_act(bus: Bus) -> None:
    network = NetworkSettings(hidden_units=8, num_layers=1, normalize=True)
    ppo_slots = AgentSlots([walkers(), walkers()], "walker")
    ppo = PPOTrainer(
        "walker",
        small_ppo(
            hyperparameters=PPOSettings(batch_size=12, buffer_size=36, num_epoch=1),
            network_settings=network,
        ),
        ppo_slots,
        Recording(bus, "p").reporter,
        seed=0,
    )
    assert ppo_slots.acting.tolist() == [True, True, False] * 2
    ppo.advance()
    assert float(ppo.agent.normalizer.count) == 2 * ACTIVE_PER_EPISODE
    # walker_0 (index 0) acts 6 steps, walker_1 (1) 2, walker_2 (2) 3: the mean index
    assert float(ppo.agent.normalizer.mean[1]) == pytest.approx((0 * 6 + 1 * 2 + 2 * 3) / 11)
    for threaded in (False, True):
        sac_slots = AgentSlots([walkers()], "walker")
        hp = SACSettings(batch_size=8, buffer_size=100, buffer_init_steps=6)
        settings = small_sac(hyperparameters=hp, network_settings=network, threaded=threaded)
        sac = SACTrainer("walker", settings, sac_slots, Recording(bus, "s").reporter, seed=0)
        for _ in range(12):
            sac.advance()
        sac.wait_for_update()
        assert float(sac.algorithm.networks.normalizer.count) == 2 * ACTIVE_PER_EPISODE
        sac.close()
        sac_slots.close()
    ppo_slots.close()


def test_gae_of_the_steps_agents_acted_ignores_the_others() -> None:
    slots = AgentSlots([walkers(max_cycles=5), walkers(max_cycles=5)], "walker")
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=12, buffer_size=48, num_epoch=1),
    )
    with Bus() as bus:
        trainer = PPOTrainer("walker", settings, slots, Recording(bus, "w").reporter, seed=0)
        next_value = trainer._collect_rollout()
        advantages, _ = trainer._advantages(next_value)
        # whatever the inactive steps' rewards and values were, the acted steps' advantages
        # stay: an agent's leaving is a terminated step, where GAE cuts
        inactive = torch.from_numpy(~trainer.rollout.valid)
        trainer.rollout.rewards[~trainer.rollout.valid] = 1000.0
        trainer.rollout.b_values[inactive] = -1000.0
        changed, _ = trainer._advantages(next_value)
    valid = torch.from_numpy(trainer.rollout.valid)
    assert not bool(inactive.all()) and bool(inactive.any())
    assert torch.equal(advantages[valid], changed[valid])
    slots.close()


def test_sac_replays_only_the_steps_agents_acted(bus: Bus) -> None:
    slots = AgentSlots([walkers()], "walker")
    settings = small_sac(
        hyperparameters=SACSettings(batch_size=8, buffer_size=100, buffer_init_steps=6)
    )
    trainer = SACTrainer("walker", settings, slots, Recording(bus, "w").reporter, seed=0)
    for _ in range(12):  # two episodes
        trainer.advance()
    assert len(trainer.replay) == trainer.step == 2 * ACTIVE_PER_EPISODE
    slots.close()


# -- PettingZoo's environments ---------------------------------------------------------------


def run_random(slots: AgentSlots, steps: int, seed: int) -> list[tuple[Any, ...]]:
    """``steps`` steps of uniformly random legal actions; every step's results."""
    rng = np.random.default_rng(seed)
    obs, _ = slots.reset(seed=seed)
    rows = []
    for _ in range(steps):
        if isinstance(obs, dict) and "action_mask" in obs:
            scores = rng.random(obs["action_mask"].shape) * obs["action_mask"]
            actions = scores.argmax(axis=1)
        else:
            space = slots.single_action_space
            assert isinstance(space, spaces.Discrete)
            actions = rng.integers(0, int(space.n), size=slots.num_envs)
        result = slots.step(actions)
        rows.append(result)
        obs = result[0]
    return rows


def test_simple_spread_has_three_slots_per_copy() -> None:
    from mpe2 import simple_spread_v3

    copies = [simple_spread_v3.parallel_env(max_cycles=5) for _ in range(2)]
    slots = AgentSlots(copies, "agent")
    assert (slots.num_envs, slots.group_size) == (6, 3)
    assert slots.learners(1) == ["agent_0", "agent_1", "agent_2"]
    rows = run_random(slots, 10, seed=0)
    assert rows[0][0].shape == (6, 18)
    # every 5 steps all three agents are truncated, together, and the copies reset
    assert [bool(r[3].all()) for r in rows] == [False] * 4 + [True] + [False] * 4 + [True]
    assert all(r[4]["active"].all() for r in rows)
    assert [bool(r[4]["episode_over"].all()) for r in rows] == [bool(r[3].all()) for r in rows]
    slots.close()


BEHAVIORS = ["archer", "knight"]


def test_knights_archers_zombies_two_behaviors_and_agents_that_die() -> None:
    kaz = "butterfly/knights_archers_zombies-v11"
    archers = AgentSlots([pettingzoo.make("parallel", kaz)], "archer", behaviors=BEHAVIORS)
    knights = AgentSlots([pettingzoo.make("parallel", kaz)], "knight", behaviors=BEHAVIORS)
    assert archers.learners(0) == ["archer_0", "archer_1"]
    assert knights.learners(0) == ["knight_0", "knight_1"]
    assert archers.co_player_behaviors == ["knight"]
    rows = run_random(knights, 300, seed=2)  # knight_0 dies at step 113
    over = [r[4]["episode_over"] for r in rows]
    died = [(t, i) for t, r in enumerate(rows) for i in range(2) if r[2][i] and not over[t][i]]
    assert died[0] == (112, 0)  # a knight dies before its episode is over
    t, i = died[0]
    assert rows[t][4]["_final_obs"][i]
    after = rows[t + 1 :]
    end = next(k for k, r in enumerate(after) if r[4]["episode_over"][i])
    assert not any(r[4]["active"][i] for r in after[: end + 1])  # inactive until the reset
    assert all(r[1][i] == 0.0 for r in after[: end + 1])
    archers.close()
    knights.close()


def test_connect_four_two_behaviors_take_turns_with_legal_random_co_players() -> None:
    mapping = {"player_0": "first", "player_1": "second"}
    copies = [pettingzoo.make("aec", "classic/connect_four-v3") for _ in range(2)]
    second = AgentSlots(copies, "second", agent_behaviors=mapping)
    obs, _ = second.reset(seed=0)
    # player_0 (a random co-player) has moved: one piece of the opponent's on the board
    assert obs["observation"][..., 1].sum(axis=(1, 2)).tolist() == [1, 1]
    assert obs["observation"][..., 0].sum() == 0
    EnvLogger.flush()
    rows = run_random(second, 200, seed=0)
    # PettingZoo logs each illegal move (and ends the game, -1 for whoever made it): none here
    assert not [m for m in EnvLogger.mqueue if "Illegal move" in str(m)]
    finals = [r[1][i] for r in rows for i in range(2) if r[4]["episode_over"][i]]
    assert len(finals) > 10 and set(finals) <= {-1.0, 0.0, 1.0}
    assert 1.0 in finals and -1.0 in finals
    second.close()
