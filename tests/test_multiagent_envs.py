"""PettingZoo environments as agent slots (``evtrain.multiagent``): which agent each slot
carries, what a slot says when its agent left or has not appeared yet, co-players, teams,
turn-based games, and the mapping of agents to behaviors, on the deterministic environments of
``tests.multiagent_envs`` (every number predictable) and on PettingZoo's own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from evtrain.errors import ConfigError
from evtrain.multiagent.copies import EpisodeResult
from evtrain.multiagent.coplayers import RandomCoPlayer
from evtrain.multiagent.mapping import (
    AgentRole,
    agent_roles,
    check_behaviors,
    default_behavior,
    parse_behavior,
)
from evtrain.multiagent.slots import AgentSlots
from tests.multiagent_envs import countdown, walkers


class Recorder:
    """A co-player that records the batches it is asked about and always plays ``action``."""

    def __init__(self, action: int = 0) -> None:
        self.action = action
        self.batches: list[Any] = []

    def __call__(self, obs: Any) -> np.ndarray:
        self.batches.append(obs)
        rows = len(obs["observation"]) if isinstance(obs, dict) else len(obs)
        return np.full(rows, self.action, dtype=np.int64)


def walker_slots(copies: int = 2, **kwargs: Any) -> AgentSlots:
    return AgentSlots([walkers() for _ in range(copies)], "walker", **kwargs)


# -- the Parallel API ---------------------------------------------------------------------------


def test_slots_are_the_learning_agents_of_each_copy_contiguously() -> None:
    slots = walker_slots(behaviors=["walker", "guide"])
    assert (slots.num_envs, slots.group_size, slots.copies) == (6, 3, 2)
    assert slots.metadata["autoreset_mode"].name == "SAME_STEP"
    assert slots.single_observation_space == spaces.Box(-1.0, 1000.0, (3,), np.float32)
    assert slots.single_action_space == spaces.Discrete(3)
    assert slots.action_space == spaces.MultiDiscrete([3] * 6)
    assert slots.learners(0) == slots.learners(1) == ["walker_0", "walker_1", "walker_2"]
    assert slots.co_player_behaviors == ["guide"]
    obs, infos = slots.reset(seed=0)
    # walker_2 has not appeared yet: inactive, and zeros where it has never been seen
    assert obs.tolist() == [[0, 0, -1], [0, 1, -1], [0, 0, 0]] * 2
    assert infos["active"].tolist() == [True, True, False] * 2
    assert infos["episode_over"].tolist() == [False] * 6
    assert "final_obs" not in infos


def test_an_agent_that_leaves_is_inactive_and_one_that_appears_becomes_active() -> None:
    slots = walker_slots()
    slots.reset(seed=0)
    actions = np.tile([1, 2, 2], 2)  # each agent is rewarded its own action
    rows = [slots.step(actions) for _ in range(7)]
    active = [r[4]["active"][:3].tolist() for r in rows]
    assert active == [
        [True, True, False],
        [True, True, False],  # walker_1 terminated here (leave_at 2)
        [True, False, False],  # walker_2 appeared after this step
        [True, False, True],
        [True, False, True],
        [True, False, True],  # max_cycles: walker_0 and walker_2 truncated, the copy reset
        [True, True, False],  # the next episode: walker_1 back, walker_2 not yet
    ]
    assert [r[1][:3].tolist() for r in rows] == [
        [1, 2, 0],
        [1, 2, 0],
        [1, 0, 0],  # an inactive slot's reward is 0
        [1, 0, 2],
        [1, 0, 2],
        [1, 0, 2],
        [1, 2, 0],
    ]
    assert [r[2][:3].tolist() for r in rows][1] == [False, True, False]
    assert not any(r[2][:3].any() for i, r in enumerate(rows) if i != 1)
    assert [r[3][:3].tolist() for r in rows][5] == [True, False, True]
    assert not any(r[3].any() for i, r in enumerate(rows) if i != 5)
    # the one who left shows its last observation; the final one is in infos
    assert rows[1][4]["final_obs"][1].tolist() == [2, 1, 2]
    assert rows[1][4]["_final_obs"].tolist() == [False, True, False] * 2
    assert [r[0][1].tolist() for r in rows[1:5]] == [[2, 1, 2]] * 4
    assert rows[2][0][2].tolist() == [3, 2, -1]  # walker_2's first observation
    # the end of the copy's episode: final observations, reset observations, episode_over
    end = rows[5]
    assert end[4]["episode_over"].tolist() == [True] * 6
    assert [end[4]["final_obs"][i].tolist() for i in (0, 2)] == [[6, 0, 1], [6, 2, 2]]
    assert end[4]["_final_obs"].tolist() == [True, False, True] * 2
    assert end[0][:3].tolist() == [[0, 0, -1], [0, 1, -1], [6, 2, 2]]
    steps = (1, 2, 3, 4, 5, 6, 1)  # the env's group reward: its step number
    assert [r[4]["group_reward"].tolist() for r in rows] == [[float(t)] * 6 for t in steps]


def test_a_copy_whose_learning_agents_all_left_starts_a_new_episode() -> None:
    env = walkers()
    slots = AgentSlots([env], "leaver", agent_behaviors={"walker_1": "leaver"})
    slots.reset(seed=4)
    first = slots.step(np.array([1]))
    obs, reward, terminated, truncated, infos = slots.step(np.array([2]))
    assert (first[2][0], terminated[0], truncated[0], reward[0]) == (False, True, False, 2.0)
    assert infos["episode_over"].tolist() == [True]  # the others go on no further
    assert infos["final_obs"][0].tolist() == [2, 1, 2]
    assert obs.tolist() == [[0, 1, -1]] and env.seeds == [4, None]


def test_episode_listeners_hear_each_copy_end_with_the_final_rewards_and_group_reward() -> None:
    slots = walker_slots()
    heard: list[EpisodeResult] = []
    slots.episode_listeners.append(heard.append)
    slots.reset(seed=0)
    for _ in range(6):
        slots.step(np.tile([1, 2, 2], 2))
    # walker_1's 2 when it left, walker_0's 1 and walker_2's 2 at the end, and the last
    # step's group reward, 6 (the walkers' is the step count)
    assert heard == [
        EpisodeResult(team=None, reward=11.0, copy=0),
        EpisodeResult(team=None, reward=11.0, copy=1),
    ]


def test_co_players_act_for_the_other_agents_in_one_call_for_all_copies() -> None:
    slots = walker_slots(copies=3)
    team, behavior = Recorder(1), Recorder(2)
    slots.co_players["guide"] = behavior
    slots.reset(seed=0)
    slots.step(np.zeros(9, dtype=np.int64))
    assert [b.tolist() for b in behavior.batches] == [[[0, 3, -1]] * 3]
    slots.co_players["guide?team=0"] = team  # a team's own co-player comes first
    slots.step(np.zeros(9, dtype=np.int64))
    assert len(team.batches) == 1 and len(behavior.batches) == 1
    assert team.batches[0].tolist() == [[1, 3, 2]] * 3  # the guide played 2 before


def test_without_a_co_player_the_other_agents_act_at_random() -> None:
    env = walkers()
    slots = AgentSlots([env], "walker")
    slots.reset(seed=3)
    for _ in range(12):
        slots.step(np.zeros(3, dtype=np.int64))
    assert {int(actions["guide_0"]) for actions in env.played} == {0, 1, 2}


def test_reset_seeds_copy_k_with_seed_plus_k_and_close_closes_every_copy() -> None:
    envs = [walkers() for _ in range(3)]
    slots = AgentSlots(envs, "walker")
    slots.reset(seed=10)
    for _ in range(6):  # one episode: the copies reset themselves, unseeded
        slots.step(np.zeros(9, dtype=np.int64))
    assert [env.seeds for env in envs] == [[10, None], [11, None], [12, None]]
    slots.close()
    assert [env.closed for env in envs] == [True] * 3


def test_a_step_needs_one_action_per_slot() -> None:
    slots = walker_slots()
    slots.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected one action per slot \(6\), got .* \(3,\)"):
        slots.step(np.zeros(3, dtype=np.int64))


# -- teams ---------------------------------------------------------------------------------------


def test_self_play_makes_each_agent_a_team_and_switches_teams_at_episode_starts() -> None:
    slots = walker_slots(self_play=True)
    assert (slots.teams, slots.learning_team, slots.group_size) == ([0, 1, 2], 0, 1)
    heard: list[EpisodeResult] = []
    slots.episode_listeners.append(heard.append)
    other = Recorder(1)
    slots.co_players["walker?team=1"] = other
    slots.reset(seed=0)
    assert slots.learners(0) == ["walker_0"]
    slots.set_learning_team(1)
    slots.step(np.array([2, 2]))
    assert slots.learners(0) == ["walker_0"]  # never mid-episode
    assert other.batches[0].tolist() == [[0, 1, -1]] * 2  # walker_1 is the other team's now
    for _ in range(5):
        slots.step(np.array([2, 2]))
    assert slots.learners(0) == slots.learners(1) == ["walker_1"]
    # walker_0's own 2 and the last step's group reward, 6
    assert heard == [EpisodeResult(team=0, reward=8.0, copy=k) for k in (0, 1)]
    with pytest.raises(ValueError, match=r"behavior 'walker' has teams \[0, 1, 2\], not 3"):
        slots.set_learning_team(3)


def test_set_learning_team_without_self_play_is_refused() -> None:
    with pytest.raises(ValueError, match="behavior 'walker' has no self_play: every agent learns"):
        walker_slots().set_learning_team(0)


def test_self_play_teams_of_different_sizes_are_refused() -> None:
    mapping = {"walker_0": "walker?team=0", "walker_1": "walker?team=0"}
    mapping["walker_2"] = "walker?team=1"
    with pytest.raises(ConfigError) as info:
        walker_slots(agent_behaviors=mapping, self_play=True, env_name="'walkers'")
    assert info.value.problems == (
        "env_settings.agent_behaviors: the self-play teams of behavior 'walker' in 'walkers' "
        "differ in size (team 0: walker_0, walker_1, team 1: walker_2); each team learns in "
        "turn on the same slots: give every team as many agents",
    )


# -- the AEC API (turn-based) --------------------------------------------------------------------

FIRST_SECOND = {"player_0": "first", "player_1": "second"}


def test_a_turn_based_step_is_the_learners_move_and_the_others_until_its_turn() -> None:
    envs = [countdown() for _ in range(2)]
    slots = AgentSlots(envs, "second", agent_behaviors=FIRST_SECOND, behaviors=["first", "second"])
    first = Recorder(0)  # takes 1
    slots.co_players["first"] = first
    obs, infos = slots.reset(seed=0)
    # player_0 moved first: 7 - 1 left, player_1's turn
    assert obs["observation"].tolist() == [[6, 1]] * 2
    assert obs["action_mask"].tolist() == [[1, 1, 1]] * 2
    assert infos["active"].tolist() == [True, True]
    steps = [slots.step(np.array(a)) for a in ([2, 0], [1, 0], [0, 0])]
    assert [s[0]["observation"].tolist() for s in steps] == [
        [[2, 1], [4, 1]],  # 6 - 3 - 1 | 6 - 1 - 1
        [[6, 1], [2, 1]],  # copy 0 took the last 2 and won: a new game, 7 - 1
        [[4, 1], [6, 1]],  # copy 1: 2 - 1, the co-player took the last one and won
    ]
    # the learner's reward: 0.5 for each co-player's move since its own (the first move of
    # a game: since the game started), +1 / -1 for a win / a loss
    assert [s[1].tolist() for s in steps] == [[1.0, 1.0], [1.0, 0.5], [1.0, -1.0]]
    assert [s[2].tolist() for s in steps] == [[False, False], [True, False], [False, True]]
    assert [s[4]["episode_over"].tolist() for s in steps] == [
        [False, False],
        [True, False],
        [False, True],
    ]
    assert [e.moves for e in envs] == [
        [("player_0", 0), ("player_1", 0), ("player_0", 0)],
        [("player_0", 0)],
    ]
    # per call: both copies' first moves, both copies, copy 1 | copy 0's new game, both, copy 1's
    assert [len(b["observation"]) for b in first.batches] == [2, 2, 1, 1, 2, 1]


def test_turn_based_learner_rewards_final_observations_and_episode_ends() -> None:
    envs = [countdown(start=4)]
    slots = AgentSlots(envs, "first", agent_behaviors=FIRST_SECOND, behaviors=["first", "second"])
    heard: list[EpisodeResult] = []
    slots.episode_listeners.append(heard.append)
    slots.co_players["second"] = Recorder(0)
    obs, _ = slots.reset(seed=0)
    assert obs["observation"].tolist() == [[4, 0]]  # the learner moves first
    obs, reward, terminated, truncated, infos = slots.step(np.array([0]))  # 4 -> 3 -> 2
    assert (obs["observation"].tolist(), reward.tolist()) == ([[2, 0]], [0.5])
    assert not terminated[0] and not infos["episode_over"][0]
    obs, reward, terminated, truncated, infos = slots.step(np.array([1]))  # takes the last 2
    assert (reward.tolist(), terminated.tolist(), truncated.tolist()) == ([1.0], [True], [False])
    assert infos["episode_over"].tolist() == [True]
    assert infos["final_obs"][0]["observation"].tolist() == [0, 0]
    assert infos["final_obs"][0]["action_mask"].tolist() == [0, 0, 0]
    assert obs["observation"].tolist() == [[4, 0]]  # reset: a new game
    assert heard == [EpisodeResult(team=None, reward=1.0, copy=0)]
    obs, reward, terminated, truncated, infos = slots.step(np.array([2]))  # 4 -> 1 -> 0
    assert (reward.tolist(), terminated.tolist()) == ([-1.0], [True])
    assert heard[-1] == EpisodeResult(team=None, reward=-1.0, copy=0)


def test_random_co_players_play_only_legal_moves() -> None:
    envs = [countdown(start=5) for _ in range(4)]
    slots = AgentSlots(envs, "first", agent_behaviors=FIRST_SECOND, behaviors=["first", "second"])
    obs, _ = slots.reset(seed=1)
    ends = 0
    for _ in range(200):  # Countdown raises on an illegal move
        legal = obs["action_mask"]
        obs, _, _, _, infos = slots.step(legal.argmax(axis=1))
        ends += int(infos["episode_over"].sum())
    assert ends > 100


def test_random_co_player_draws_legal_actions_and_all_when_none_is_legal() -> None:
    player = RandomCoPlayer(spaces.Discrete(3, start=1), np.random.default_rng(0))
    mask = np.array([[0, 1, 0], [1, 0, 1], [0, 0, 0]] * 200, dtype=np.int8)
    actions = player({"observation": np.zeros((600, 1)), "action_mask": mask})
    assert set(actions[0::3].tolist()) == {2}
    assert set(actions[1::3].tolist()) == {1, 3}
    assert set(actions[2::3].tolist()) == {1, 2, 3}
    box = RandomCoPlayer(spaces.Box(-2.0, 2.0, (2,), np.float32), np.random.default_rng(0))
    drawn = box(np.zeros((100, 4)))
    assert drawn.shape == (100, 2) and drawn.dtype == np.float32 and np.abs(drawn).max() <= 2.0


def test_a_turn_based_game_with_two_learners_per_copy_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        AgentSlots([countdown()], "player", env_name="'countdown'")
    assert info.value.problems == (
        "env_settings.agent_behaviors: 'countdown' is a turn-based (AEC) game, and behavior "
        "'player' would have 2 learning agents in each copy (player_0, player_1); evtrain "
        "trains one agent per copy of a turn-based game: give the agents different behaviors "
        "(env_settings.agent_behaviors: {player_0: ..., player_1: ...}), or make them teams "
        "with behaviors.player.self_play",
    )


def test_turn_based_self_play_learns_one_team_at_a_time() -> None:
    slots = AgentSlots([countdown()], "player", self_play=True)
    assert (slots.teams, slots.group_size, slots.learning_team) == ([0, 1], 1, 0)
    slots.reset(seed=0)
    assert slots.learners(0) == ["player_0"]


# -- mapping -------------------------------------------------------------------------------------


def test_default_behavior_is_the_id_without_its_number() -> None:
    assert [default_behavior(a) for a in ("player_0", "adversary_1", "agent", "a_b_12")] == [
        "player",
        "adversary",
        "agent",
        "a_b",
    ]
    assert parse_behavior("Striker?team=1") == ("Striker", 1)
    assert parse_behavior("Goalie") == ("Goalie", None)
    with pytest.raises(ValueError, match=r"expected 'behavior' or 'behavior\?team=N'"):
        parse_behavior("Goalie?team=x")


def test_explicit_mapping_and_teams() -> None:
    agents = ["red_0", "red_1", "blue_0", "blue_1"]
    mapping = {"red_0": "Soccer?team=0", "red_1": "Soccer?team=0", "blue_0": "Soccer?team=1"}
    mapping["blue_1"] = "Soccer?team=1"
    assert agent_roles(agents, mapping) == {
        "red_0": AgentRole(behavior="Soccer", team=0),
        "red_1": AgentRole(behavior="Soccer", team=0),
        "blue_0": AgentRole(behavior="Soccer", team=1),
        "blue_1": AgentRole(behavior="Soccer", team=1),
    }
    assert agent_roles(agents, {}, self_play=["red"])["red_1"] == AgentRole(behavior="red", team=1)
    assert agent_roles(agents, {})["red_1"] == AgentRole(behavior="red", team=0)


def test_mapping_errors_name_the_agents_and_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        agent_roles(["a_0"], {"b_0": "x"})
    assert info.value.problems == (
        "env_settings.agent_behaviors: no agent 'b_0' in the environment; its agents are a_0",
    )
    with pytest.raises(ConfigError, match=r"give a \?team= for some agents only"):
        agent_roles(["a_0", "a_1"], {"a_0": "a?team=0"})
    roles = agent_roles(["walker_0", "guide_0"], {})
    with pytest.raises(ConfigError) as info:
        check_behaviors(roles, ["walker", "Runner"])
    assert info.value.problems == (
        "behaviors: agents guide_0 of the environment belong to behavior 'guide', which has no "
        "settings; add behaviors.guide, or map the agents to behaviors that have settings with "
        "env_settings.agent_behaviors (behaviors: walker, Runner)",
        "behaviors.Runner: no agent of the environment belongs to behavior 'Runner' (agents: "
        "walker_0, guide_0, behaviors by default their id without _<digits>: walker, guide); "
        "rename the behavior, or map agents to it with env_settings.agent_behaviors (e.g. "
        "{walker_0: Runner})",
    )


def test_agents_of_one_behavior_must_share_their_spaces() -> None:
    with pytest.raises(ConfigError) as info:
        AgentSlots([walkers(guide_actions=4)], "walker", agent_behaviors={"guide_0": "walker"})
    assert info.value.problems == (
        "env_settings.agent_behaviors: agents walker_0 and guide_0 of behavior 'walker' have "
        "different spaces (observation Box(-1.0, 1000.0, (3,), float32) and Box(-1.0, 1000.0, "
        "(3,), float32), action Discrete(3) and Discrete(4)); one behavior's agents share one "
        "network: map them to different behaviors",
    )
