"""PettingZoo environments through ``env_settings`` and ``evtrain learn``: the ids and factories
accepted, what is refused and how the errors say it, each behavior acting for its agents in
the other behaviors' copies, and real CLI runs (one ONNX file and one stats folder per
behavior, read back in onnxruntime and TensorBoard)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus
from evtrain.config.options import EnvironmentSettings, RunOptions
from evtrain.errors import ConfigError
from evtrain.extras import install_hint
from evtrain.multiagent.slots import AgentSlots
from evtrain.run.environments.co_players import CoPlayerWiring, PolicyCoPlayer
from evtrain.run.environments.envs import make_envs
from evtrain.run.learn import learn
from evtrain.trainers import MemorySettings, NetworkSettings, PPOSettings, PPOTrainer
from evtrain.trainers.settings import TrainerSettings
from tests.helpers import run_config
from tests.helpers import tensorboard_steps as scalar_steps
from tests.multiagent_envs import onnx_actions, tiny
from tests.trainers.helpers import Recording, small_ppo

CONNECT_FOUR = "pettingzoo.classic.connect_four_v3:env"
FIRST_SECOND = {"player_0": "first", "player_1": "second"}
OLD_API = "ignore:The old environment creation API:DeprecationWarning"
"""PettingZoo 1.27 warns when its ``<name>_vN`` modules are imported (its registry is new)."""


def behaviors(*names: str, **settings: Any) -> dict[str, TrainerSettings]:
    return {name: TrainerSettings(**settings) for name in names}


def slots_of(env_id: str, behavior: str, *names: str, **options: Any) -> AgentSlots:
    settings = EnvironmentSettings(env_id=env_id, **options)
    envs = make_envs(settings, behavior=behavior, behaviors=behaviors(*names))
    assert isinstance(envs, AgentSlots)
    return envs


# -- env_settings --------------------------------------------------------------------------------


def test_a_factory_or_a_pettingzoo_id_builds_the_behaviors_slots() -> None:
    spread = slots_of(
        "mpe2.simple_spread_v3:parallel_env", "agent", "agent", num_envs=2, env_kwargs={"N": 2}
    )
    assert (spread.api, spread.num_envs, spread.group_size) == ("parallel", 4, 2)
    four = slots_of(
        "classic/connect_four-v3", "first", "first", "second", agent_behaviors=FIRST_SECOND
    )
    assert (four.api, four.num_envs, four.learners(0)) == ("aec", 1, ["player_0"])
    kaz = slots_of("butterfly/knights_archers_zombies-v11", "knight", "knight", "archer")
    assert (kaz.api, kaz.learners(0)) == ("parallel", ["knight_0", "knight_1"])
    for envs in (spread, four, kaz):
        envs.close()


@pytest.mark.filterwarnings(OLD_API)
def test_a_module_of_pettingzoo_stands_for_its_factory() -> None:
    by_module = slots_of(
        "pettingzoo.classic:connect_four_v3",
        "first",
        "first",
        "second",
        num_envs=3,
        agent_behaviors=FIRST_SECOND,
    )
    assert (by_module.api, by_module.num_envs) == ("aec", 3)
    by_module.close()
    dotted = slots_of(
        "pettingzoo.classic.connect_four_v3",
        "first",
        "first",
        "second",
        agent_behaviors=FIRST_SECOND,
    )
    assert dotted.api == "aec"
    dotted.close()
    by_module = slots_of(
        "pettingzoo.butterfly:knights_archers_zombies_v11", "knight", "knight", "archer"
    )
    assert by_module.api == "parallel"  # its parallel_env
    by_module.close()
    by_factory = slots_of(CONNECT_FOUR, "second", "first", "second", agent_behaviors=FIRST_SECOND)
    assert by_factory.learners(0) == ["player_1"]
    by_factory.close()


def test_missing_pettingzoo_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.partition(".")[0] in ("pettingzoo", "mpe2")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    monkeypatch.setitem(sys.modules, "mpe2", None)
    with pytest.raises(ConfigError) as info:
        make_envs(EnvironmentSettings(env_id="mpe2.simple_spread_v3:parallel_env"), behavior="a")
    assert info.value.problems == (
        "env_settings.env_id: 'mpe2.simple_spread_v3:parallel_env' needs a package that is not "
        "installed (ModuleNotFoundError: No module named 'mpe2.simple_spread_v3'; 'mpe2' is not a "
        f"package); {install_hint('pettingzoo')}: PettingZoo, its MPE and butterfly "
        "environments",
    )
    with pytest.raises(ConfigError) as info:
        make_envs(EnvironmentSettings(env_id="classic/connect_four-v3"), behavior="a")
    assert info.value.problems[0].endswith(
        " Or give module:callable. 'classic/connect_four-v3' looks like an id of PettingZoo, "
        f"which is not installed; {install_hint('pettingzoo')}"
    )


@pytest.mark.parametrize(
    ("env_id", "package", "extra"),
    [
        ("pettingzoo.classic.leduc_holdem_v4", "rlcard", "pettingzoo-classic"),
        ("pettingzoo.classic:texas_holdem_v4", "rlcard", "pettingzoo-classic"),
        ("classic/leduc_holdem-v4", "rlcard", "pettingzoo-classic"),
        ("sisl/multiwalker-v9", "Box2D", "pettingzoo-sisl"),
    ],
)
def test_a_game_whose_package_is_missing_names_it_and_its_extra(
    env_id: str, package: str, extra: str
) -> None:
    """rlcard and Box2D are not installed with the test extras: their real imports fail."""
    assert importlib.util.find_spec(package) is None
    with pytest.raises(ConfigError) as info:
        make_envs(EnvironmentSettings(env_id=env_id), behavior="player")
    assert info.value.problems == (
        f"env_settings.env_id: {env_id!r} needs {package}, which is not installed; "
        f"{install_hint(extra)}",
    )


def test_what_pettingzoo_environments_cannot_do_yet_is_refused_by_name() -> None:
    settings = EnvironmentSettings(env_id="classic/connect_four-v3", vectorization="async")
    memory = behaviors(
        "player", network_settings=NetworkSettings(memory=MemorySettings(memory_size=8))
    )
    with pytest.raises(ConfigError) as info:
        make_envs(settings, behavior="player", behaviors=memory)
    assert info.value.problems == (
        "env_settings.vectorization: 'async' is not supported with a turn-based (AEC) "
        "PettingZoo environment ('classic/connect_four-v3') yet: every move would be a round "
        "trip to the copy's process; use vectorization: sync (the num_envs copies still step "
        "together)",
        "behaviors.player.network_settings.memory: not supported with a PettingZoo environment "
        "('classic/connect_four-v3') yet: an agent's memory would run on through the steps it "
        "is out of its episode; remove network_settings.memory",
    )
    with pytest.raises(ConfigError) as info:
        make_envs(EnvironmentSettings(env_id="classic/connect_four-v3"))
    assert info.value.problems == (
        "env_settings.env_id: 'classic/connect_four-v3' is a PettingZoo environment, which this "
        "command does not support yet (evtrain learn trains on it)",
    )


def test_agent_behaviors_are_validated_and_refused_for_a_gymnasium_environment() -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"env_settings": {"agent_behaviors": {"player_0": "a?team=x"}}})
    assert info.value.problems == (
        "env_settings.agent_behaviors: 'player_0': expected 'behavior' or 'behavior?team=N' "
        "(N = 0, 1, ...), got 'a?team=x'",
    )
    settings = EnvironmentSettings(env_id="CartPole-v1", agent_behaviors={"player_0": "a"})
    with pytest.raises(ConfigError) as info:
        make_envs(settings)
    assert info.value.problems == (
        "env_settings.agent_behaviors: 'CartPole-v1' is a Gymnasium environment, with one agent: "
        "agent_behaviors maps the agents of a PettingZoo environment; remove it",
    )


# -- co-players ----------------------------------------------------------------------------------


def test_each_behavior_acts_with_its_current_policy_in_the_others_copies(bus: Bus) -> None:
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=16, buffer_size=32, num_epoch=1),
        network_settings=NetworkSettings(hidden_units=8, vis_encode_type="fully_connected"),
    )
    trainers = {}
    for name in ("first", "second"):
        envs = slots_of(
            "classic/connect_four-v3",
            name,
            "first",
            "second",
            num_envs=2,
            agent_behaviors=FIRST_SECOND,
        )
        trainers[name] = PPOTrainer(name, settings, envs, Recording(bus, name).reporter, seed=0)
    wiring = CoPlayerWiring(trainers)
    second_envs = trainers["second"].envs
    assert isinstance(second_envs, AgentSlots)
    assert second_envs.co_players == {} and trainers["first"].envs.co_players == {}
    wiring.refresh_all()
    player = second_envs.co_players["first"]
    assert isinstance(player, PolicyCoPlayer)
    assert trainers["first"].envs.co_players["second"] is wiring.players["second"]
    obs, _ = trainers["first"].envs.reset(seed=0)
    policy = trainers["first"].policy_module()
    with torch.no_grad():
        expected = policy(*(torch.as_tensor(obs[k], dtype=torch.float32) for k in sorted(obs)))
    assert player(obs).tolist() == expected.tolist()
    before = [p.clone() for p in player.module.parameters()]
    trainers["first"].advance()  # an update: the co-player keeps the weights it had
    assert all(torch.equal(a, b) for a, b in zip(before, player.module.parameters(), strict=True))
    wiring.refresh("first", trainers["first"])
    trained = trainers["first"].policy_module().state_dict()
    assert all(torch.equal(trained[k], v) for k, v in player.module.state_dict().items())
    assert not all(
        torch.equal(a, b) for a, b in zip(before, player.module.parameters(), strict=True)
    )
    for trainer in trainers.values():
        trainer.envs.close()


def test_the_run_refreshes_each_behaviors_co_players_after_each_of_its_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshed: list[tuple[str, int]] = []
    original = CoPlayerWiring.refresh

    def recording(wiring: CoPlayerWiring, name: str, trainer: Any) -> None:
        refreshed.append((name, trainer.step))
        original(wiring, name, trainer)

    monkeypatch.setattr(CoPlayerWiring, "refresh", recording)
    behavior = {"max_steps": 384, "network_settings": {"vis_encode_type": "fully_connected"}}
    env = {"env_id": "classic/connect_four-v3", "agent_behaviors": FIRST_SECOND, "num_envs": 4}
    options = tiny(behavior, env, ("first", "second"))
    options["checkpoint_settings"]["results_dir"] = str(tmp_path)
    result = learn(options)
    assert result.steps == {"first": 384, "second": 384}
    # before the first step, then after each turn (one rollout of 192 steps, one update)
    assert refreshed == [
        ("first", 0),
        ("second", 0),
        ("first", 192),
        ("second", 192),
        ("first", 384),
        ("second", 384),
    ]


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_trains_simple_spread_with_ppo_and_runs_its_policy(tmp_path: Path) -> None:
    env = {"env_id": "mpe2.simple_spread_v3:parallel_env", "env_kwargs": {"max_cycles": 25}}
    options = tiny({}, {**env, "num_envs": 2}, ("agent",))
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    actions = onnx_actions(run / "agent.onnx", {"obs": np.zeros((6, 18), dtype=np.float32)})
    assert actions.shape == (6,) and set(actions.tolist()) <= {0, 1, 2, 3, 4}
    assert scalar_steps(run / "agent", "Environment/Cumulative Reward") == [576, 1152]
    result = run_config(tmp_path, options, "--inference")
    assert result.returncode == 0, result.stderr
    inferred = scalar_steps(run / "agent" / "inference", "Environment/Cumulative Reward")
    assert inferred == [576, 1152]


@pytest.mark.filterwarnings(OLD_API)
def test_cli_trains_two_behaviors_of_connect_four(tmp_path: Path) -> None:
    behavior = {"network_settings": {"hidden_units": 16, "vis_encode_type": "fully_connected"}}
    env = {"env_id": CONNECT_FOUR, "agent_behaviors": FIRST_SECOND, "num_envs": 4}
    result = run_config(tmp_path, tiny(behavior, env, ("first", "second")))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    board = np.zeros((3, 6, 7, 2), dtype=np.float32)
    mask = np.ones((3, 7), dtype=np.float32)
    for name in ("first", "second"):
        actions = onnx_actions(run / f"{name}.onnx", {"action_mask": mask, "observation": board})
        assert actions.shape == (3,) and set(actions.tolist()) <= set(range(7))
        assert scalar_steps(run / name, "Environment/Cumulative Reward") == [576, 1152]


def test_cli_behaviors_that_do_not_fit_the_agents_are_one_line_each(tmp_path: Path) -> None:
    options = tiny({}, {"env_id": "classic/connect_four-v3"}, ("first", "player"))
    result = run_config(tmp_path, options)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: behaviors.first: no agent of the environment belongs to behavior "
        "'first' (agents: player_0, player_1, behaviors by default their id without _<digits>: "
        "player); rename the behavior, or map agents to it with env_settings.agent_behaviors "
        "(e.g. {player_0: first})\n",
    )
