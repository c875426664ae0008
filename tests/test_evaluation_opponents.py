"""``behaviors.<name>.evaluation.opponents``: a PettingZoo behavior evaluated against each
opponent in every seat (real tic-tac-toe self-play runs), its win, draw and loss rates and mean
return per opponent in every writer, ``best_by`` following one of them, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from evtrain import Bus, ConfigError, EvaluationEvent, RunOptions
from evtrain.run.evaluation.best_model import BestRecord
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import config, tensorboard_scalars
from tests.multiagent_envs import tiny

pytestmark = pytest.mark.filterwarnings(
    # PettingZoo's registry imports its games' modules, whose first import warns
    "ignore:The old environment creation API:DeprecationWarning"
)

ILLEGAL = "examples.players:tictactoe_illegal"
STATS = ("Win Rate", "Draw Rate", "Loss Rate", "Mean Return")


def tictactoe(tmp_path: Path, run_id: str = "run", **evaluation: Any) -> dict[str, Any]:
    """A tiny tic-tac-toe self-play run (256 steps), evaluated every 128 steps, 3 episodes a
    seat."""
    return {
        "behaviors": {
            "player": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
                "network_settings": {"hidden_units": 16, "vis_encode_type": "fully_connected"},
                "max_steps": 256,
                "time_horizon": 16,
                "summary_freq": 128,
                "checkpoint_interval": 10**6,
                "self_play": {"save_steps": 64, "team_change": 128, "swap_steps": 32},
                "evaluation": {"every": 128, "episodes": 3, **evaluation},
            }
        },
        "env_settings": {"env_id": "classic/tictactoe-v3", "num_envs": 4, "seed": 1},
        "checkpoint_settings": {"run_id": run_id, "results_dir": str(tmp_path / "results")},
    }


def evaluations(options: dict[str, Any]) -> list[EvaluationEvent]:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    return recorder.of(EvaluationEvent)


def test_every_seat_against_each_opponent_in_every_writer(tmp_path: Path) -> None:
    """Against the always-illegal player the learner wins every game in both seats (a result
    known exactly); ``random`` and ``latest`` get their four stats too, in TensorBoard, and
    ``best_by`` keeps the first evaluation that won them all (a tie is no better)."""
    options = tictactoe(
        tmp_path,
        opponents=["random", "latest", {"name": "illegal", "player": ILLEGAL}],
        best_by="illegal/Win Rate",
    )
    events = evaluations(options)
    assert [e.step for e in events] == [128, 256]
    for event in events:
        assert len(event.returns) == len(event.lengths) == 3 * 2 * 3  # opponents x seats x 3
        assert event.returns[12:] == (0.0,) * 6  # an illegal move: -1 to it, 0 to the learner
        stats = event.opponent_stats
        assert [stats[f"illegal/{s}"] for s in STATS] == [1.0, 0.0, 0.0, 0.0]
        assert stats["illegal/Win Rate as Team 0"] == stats["illegal/Win Rate as Team 1"] == 1.0
        for label in ("random", "latest"):
            rates = [stats[f"{label}/{s}"] for s in STATS[:3]]
            assert sum(rates) == pytest.approx(1.0)
            assert all(rate * 6 == pytest.approx(round(rate * 6)) for rate in rates)
            seats = [stats[f"{label}/Win Rate as Team {team}"] for team in (0, 1)]
            assert sum(seats) / 2 == pytest.approx(rates[0])
        assert len(stats) == 3 * (4 + 2)
    folder = tmp_path / "results" / "run" / "player"
    for label in ("random", "latest", "illegal"):
        for stat in STATS:
            scalars = tensorboard_scalars(folder, f"Evaluation/{label}/{stat}")
            assert [step for step, _ in scalars] == [128, 256]
            expected = [e.opponent_stats[f"{label}/{stat}"] for e in events]
            assert [value for _, value in scalars] == pytest.approx(expected)
    record = json.loads((folder / "best.json").read_text())
    assert (record["step"], record["best_by"], record["value"]) == (128, "illegal/Win Rate", 1.0)
    assert record["mean_return"] == pytest.approx(events[0].mean_return)


def rps(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of :func:`tictactoe` on rock-paper-scissors (PettingZoo's Parallel rps_v2,
    which observes the other player's last move: ``Discrete(4)``)."""
    options["env_settings"]["env_id"] = "classic/rps-v2"
    options["behaviors"]["player"]["network_settings"] = {"hidden_units": 16}
    return options


@pytest.mark.parametrize("game", ["tictactoe", "rps"])
def test_another_runs_onnx_and_checkpoint_play_alike(tmp_path: Path, game: str) -> None:
    """An exported policy (onnxruntime, its inputs fed by name: tic-tac-toe's dictionary
    observation, rock-paper-scissors' one-hot) and the checkpoint it was exported with (loaded
    into the behavior's network) are the same player: the same results, episode for
    episode."""
    made = tictactoe if game == "tictactoe" else lambda *a, **k: rps(tictactoe(*a, **k))
    first = made(tmp_path, "first", opponents=["random"])
    first["behaviors"]["player"]["max_steps"] = 128
    evaluations(first)
    run = tmp_path / "results" / "first"
    opponents = [
        str(run / "player.onnx"),
        {"name": "folder", "player": str(run)},
        {"name": "file", "player": str(run / "player" / "checkpoint.pt")},
    ]
    events = evaluations(made(tmp_path, "second", opponents=opponents))
    assert events
    for event in events:
        stats = event.opponent_stats
        for stat in STATS:
            assert stats[f"player/{stat}"] == stats[f"folder/{stat}"] == stats[f"file/{stat}"]
        assert event.returns[:6] == event.returns[6:12] == event.returns[12:]


def test_a_parallel_game_against_the_latest_policy_is_always_drawn(tmp_path: Path) -> None:
    """Rock-paper-scissors (PettingZoo's Parallel rps_v2) observes the other's last move: the
    deterministic policy against itself plays the same move as its opponent every step, in
    both seats."""
    events = evaluations(rps(tictactoe(tmp_path, opponents=["latest"])))
    assert [e.step for e in events] == [128, 256]
    for event in events:
        assert event.returns == (0.0,) * 6
        assert event.lengths == (15,) * 6  # rps_v2: 15 moves a game
        assert [event.opponent_stats[f"latest/{s}"] for s in STATS] == [0.0, 1.0, 0.0, 0.0]


WALKERS = {"env_id": "tests.multiagent_envs:walkers", "num_envs": 2}


def test_a_behavior_without_self_play_faces_the_other_behaviors_agents(tmp_path: Path) -> None:
    """Walkers (tests/multiagent_envs.py, Parallel): behavior ``walker`` (three agents, one
    leaving, one appearing) against a scripted ``guide_0`` that always scores 0: each walker
    scores its action (0 to 2), so the walkers never lose; one seat, 4 episodes of 6 steps."""
    options = tiny({}, WALKERS, ("walker", "guide"))
    options["checkpoint_settings"]["results_dir"] = str(tmp_path / "results")
    opponents = ["tests.multiagent_envs:guide_still", "random"]
    evaluation = {"every": 576, "episodes": 4, "opponents": opponents}
    options["behaviors"]["walker"]["evaluation"] = evaluation
    events = evaluations(options)
    assert len(events) == 2  # a step counts the agents there: not a multiple of 576
    for event in events:
        assert event.lengths == (6,) * 8
        stats = event.opponent_stats
        assert stats["guide_still/Loss Rate"] == 0.0
        mean = stats["guide_still/Mean Return"]
        assert mean == pytest.approx(sum(event.returns[:4]) / 4)
        assert stats["guide_still/Win Rate"] == pytest.approx(
            sum(r > 0 for r in event.returns[:4]) / 4
        )


def test_latest_cannot_play_a_behavior_of_other_spaces(tmp_path: Path) -> None:
    options = tiny({}, {**WALKERS, "env_kwargs": {"guide_actions": 2}}, ("walker", "guide"))
    options["checkpoint_settings"]["results_dir"] = str(tmp_path / "results")
    options["behaviors"]["walker"]["evaluation"] = {"every": 576, "opponents": ["latest"]}
    with pytest.raises(ConfigError) as error:
        learn(options)
    assert error.value.problems == (
        "behaviors.walker.evaluation.opponents[0]: 'latest' plays with behavior 'walker''s "
        "network, and agent 'guide_0' of behavior 'guide' has other spaces; choose random, a "
        "scripted player or an ONNX model of that behavior",
    )


@pytest.mark.parametrize(
    ("evaluation", "problem"),
    [
        (
            {"opponents": ["random", "random"]},
            "behaviors.player.evaluation.opponents[1]: its label 'random' is opponents[0]'s "
            "too; give one of them another: {name: <label>, player: random}",
        ),
        (
            {"opponents": ["random", 7]},
            "behaviors.player.evaluation.opponents[1]: expected one of random, latest, "
            "module:function, a .onnx file, a checkpoint (.pt file, run or behavior folder), "
            "or {name: <label>, player: <one of these>}, got 7",
        ),
        (
            {"opponents": [{"name": "a/b", "player": "random"}]},
            "behaviors.player.evaluation.opponents[0].name: expected a label of letters, "
            "digits, spaces, '_', '-' and '.' (it names the stats Evaluation/<name>/...), "
            "got 'a/b'",
        ),
        (
            {"opponents": [{"player": "random", "label": "r"}]},
            "behaviors.player.evaluation.opponents[0]: unknown key label (an opponent's keys "
            "are name and player)",
        ),
        (
            {"opponents": ["random"], "best_by": "random/Wins"},
            "behaviors.player.evaluation.best_by: expected one of 'Mean Return', "
            "'random/Win Rate', 'random/Draw Rate', 'random/Loss Rate', 'random/Mean Return' "
            "(Mean Return, or an opponent's <label>/<stat>), got 'random/Wins'",
        ),
    ],
)
def test_bad_opponents_name_the_item(evaluation: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        RunOptions.from_dict({"behaviors": {"player": {"evaluation": {"every": 9, **evaluation}}}})
    assert error.value.problems == (problem,)


@pytest.mark.parametrize(
    ("player", "label"),
    [
        ("random", "random"),
        ("latest", "latest"),
        ("examples.players:tictactoe_perfect", "tictactoe_perfect"),
        ("runs/rival/player.onnx", "player"),
        ("results/old/player/player-4000.pt", "player-4000"),
        ("results/old run/player/checkpoint.pt", "player"),  # checkpoint.pt: its folder's name
        ("results/old run", "old_run"),
    ],
)
def test_the_label_of_a_bare_player(player: str, label: str) -> None:
    options = RunOptions.from_dict(
        {"behaviors": {"player": {"evaluation": {"every": 9, "opponents": [player]}}}}
    )
    settings = options.behaviors["player"].evaluation
    assert settings is not None
    assert [o.label for o in settings.opponent_list()] == [label]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"opponents": []},
            "behaviors.player.evaluation.opponents: required for a PettingZoo environment "
            "('classic/tictactoe-v3'): list who the behavior plays against, e.g. opponents: "
            "[random, latest] (random, latest, module:function, a .onnx file or a checkpoint; "
            "docs/evaluation.md)",
        ),
        (
            {"opponents": ["random", "nowhere/player.onnx"]},
            "behaviors.player.evaluation.opponents[1]: nowhere/player.onnx does not exist; "
            "give an exported policy (a run's <Behavior>.onnx)",
        ),
        (
            {"opponents": ["nowhere/run"]},
            "behaviors.player.evaluation.opponents[0]: nowhere/run does not exist; give "
            "random, latest, module:function, a .onnx file, or a checkpoint: a .pt file, or a "
            "run or behavior folder holding player/checkpoint.pt or checkpoint.pt",
        ),
        (
            {"opponents": ["random"], "video": {"episodes": 1}},
            "behaviors.player.evaluation.video: not supported for a PettingZoo environment "
            "('classic/tictactoe-v3') yet; remove video",
        ),
        (
            {"opponents": ["examples.players:no_such_player"]},
            "behaviors.player.evaluation.opponents[0]: 'examples.players:no_such_player' "
            "cannot be imported (AttributeError: module 'examples.players' has no attribute "
            "'no_such_player'); give module:function of a module importable from the run's "
            "working folder or the installed packages",
        ),
    ],
)
def test_opponents_that_cannot_play_fail_the_run(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as error:
        learn(tictactoe(tmp_path, **change))
    assert error.value.problems == (problem,)


def test_a_checkpoint_of_another_network_fails_the_run_when_it_starts(tmp_path: Path) -> None:
    first = tictactoe(tmp_path, "first", opponents=["random"])
    first["behaviors"]["player"]["max_steps"] = 128
    evaluations(first)
    run = tmp_path / "results" / "first"
    second = tictactoe(tmp_path, "second", opponents=["random", str(run)])
    second["behaviors"]["player"]["network_settings"]["hidden_units"] = 32
    with pytest.raises(ConfigError) as error:
        learn(second)
    (problem,) = error.value.problems
    assert problem.startswith(
        f"behaviors.player.evaluation.opponents[1]: {run / 'player' / 'checkpoint.pt'} does not "
        "fit behavior 'player''s network ("
    )
    assert problem.endswith("; give a checkpoint of the same network settings")
    assert not (tmp_path / "results" / "second" / "player" / "checkpoint.pt").exists()


def test_a_gymnasium_environment_refuses_opponents(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        learn(config(tmp_path, evaluation={"every": 128, "opponents": ["random"]}))
    assert error.value.problems == (
        "behaviors.CartPole.evaluation.opponents: 'CartPole-v1' is a Gymnasium environment, "
        "with one agent: there is no seat for an opponent; remove opponents",
    )


def test_a_shared_environment_refuses_evaluation() -> None:
    options = {
        "behaviors": {"agent": {"evaluation": {"every": 9, "opponents": ["random"]}}},
        "env_settings": {"env_id": "mpe2.simple_spread_v3:parallel_env", "shared_env": True},
    }
    with pytest.raises(ConfigError) as error:
        learn(options)
    assert (
        "behaviors.agent.evaluation: not supported in a shared environment "
        "(env_settings.shared_env) yet; remove evaluation, or remove env_settings.shared_env "
        "(each behavior then trains on copies of its own)"
    ) in error.value.problems


def test_resume_keeps_the_best_of_its_stat_and_starts_afresh_for_another(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A win rate of 1 against the illegal player cannot be beaten: the resumed run keeps the
    best of step 128; resumed again with ``best_by: Mean Return``, its first evaluation is the
    new best."""
    record = tmp_path / "results" / "run" / "player" / "best.json"

    def run(max_steps: int, best_by: str, resume: bool) -> dict[str, Any]:
        options = tictactoe(tmp_path, opponents=[ILLEGAL], best_by=best_by)
        options["behaviors"]["player"]["max_steps"] = max_steps
        options["behaviors"]["player"]["checkpoint_interval"] = 128
        options["checkpoint_settings"]["resume"] = resume
        evaluations(options)
        found: dict[str, Any] = json.loads(record.read_text())
        return found

    first = run(128, "tictactoe_illegal/Win Rate", resume=False)
    assert (first["step"], first["best_by"], first["value"]) == (
        128,
        "tictactoe_illegal/Win Rate",
        1.0,
    )
    assert run(256, "tictactoe_illegal/Win Rate", resume=True) == first
    caplog.clear()
    again = run(384, "Mean Return", resume=True)
    assert (
        "The best model so far followed 'tictactoe_illegal/Win Rate', and evaluation.best_by is "
        "now 'Mean Return': the best model starts afresh"
    ) in [r.getMessage() for r in caplog.records]
    assert (again["step"], again["best_by"]) == (384, "Mean Return")
    assert again["value"] == again["mean_return"]


class FirstLegalMove(torch.nn.Module):
    """A policy module (tic-tac-toe's inputs in the order of its ``Dict`` space's keys: the
    action mask, the board planes): the first legal cell."""

    def forward(self, mask: torch.Tensor, board: torch.Tensor) -> torch.Tensor:
        return mask.argmax(dim=1)


def test_an_evaluation_repeats_with_its_seed() -> None:
    """Random and scripted opponents draw from generators seeded for each episode: the same
    seed plays the same games, another seed others."""
    from evtrain.config.options import EnvironmentSettings
    from evtrain.evaluation.opponents import opponents_of
    from evtrain.run.environments.envs import make_envs
    from evtrain.run.evaluation.matches import Opponents, game_of

    options = RunOptions.from_dict(tictactoe(Path("unused")))
    env = EnvironmentSettings(env_id="classic/tictactoe-v3", num_envs=1)
    slots = make_envs(env, behavior="player", behaviors=options.behaviors)
    try:
        items = ["random", "examples.players:tictactoe_perfect"]
        opponents = Opponents(game_of(slots), opponents_of(items), {}, "opponents")
        results = [opponents.play(FirstLegalMove(), episodes=8, seed=s) for s in (3, 3, 4)]
    finally:
        slots.close()
    assert results[0] == results[1]
    assert results[0].lengths != results[2].lengths
    assert results[0].stats["tictactoe_perfect/Loss Rate"] > 0.5  # it punishes the first cell


def test_a_best_record_from_before_best_by_follows_the_mean_return(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    old = {"step": 5, "mean_return": 0.5, "episodes": 4, "checkpoint": "c", "model": None}
    path.write_text(json.dumps(old))
    record = BestRecord.read(path)
    assert record is not None
    assert (record.best_by, record.value) == ("Mean Return", 0.5)
