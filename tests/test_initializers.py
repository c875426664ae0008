"""Initializer plugins: which one a run uses, the built-in ``torch`` one, and one-process worlds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import importlib_metadata
import pytest
import torch
import torch.distributed as dist

from evtrain import PluginError, RunOptions, StatsAggregationMethod, StatsSummary
from evtrain.cli import _parser, options_from_cli
from evtrain.distributed import TorchInitializer, World
from evtrain.plugins import INITIALIZER, Plugin, discover, from_entry_point
from evtrain.run.wiring import active_initializer, initialized, load_initializer
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from tests import plugin_fixtures
from tests.helpers import free_port
from tests.plugin_fixtures import FixtureInitializer


def initializer(name: str, function: str) -> Plugin:
    value = f"tests.plugin_fixtures:{function}"
    entry_point = importlib_metadata.EntryPoint(name=name, value=value, group=INITIALIZER)
    return from_entry_point(entry_point)


def options(**plugins: Any) -> RunOptions:
    return RunOptions.from_dict({"checkpoint_settings": {"run_id": "r"}, "plugins": plugins})


TORCH = discover([INITIALIZER])[0]


def test_evtrain_ships_the_torch_initializer() -> None:
    assert [(p.name, p.distribution, p.value) for p in discover([INITIALIZER])] == [
        ("torch", "evtrain", "evtrain.distributed:torch_initializer")
    ]
    assert isinstance(load_initializer(options(initializer="torch")), TorchInitializer)


def test_the_only_active_initializer_is_used_unless_disabled() -> None:
    found = [initializer("fixture", "fixture_initializer")]
    assert isinstance(load_initializer(options(), found), FixtureInitializer)
    assert load_initializer(options(disabled=["fixture"]), found) is None
    assert load_initializer(options(), []) is None


def test_of_two_installed_initializers_the_one_that_applies_is_used(
    no_torchrun: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch`` applies only under torchrun: outside it, the fixture (which always applies)
    is used without a choice; under torchrun both apply, and the run must choose."""
    found = [initializer("fixture", "fixture_initializer"), TORCH]
    assert isinstance(load_initializer(options(), found), FixtureInitializer)
    assert load_initializer(options(disabled=["fixture"]), found) is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PluginError) as info:
        load_initializer(options(), found)
    assert str(info.value) == (
        "2 initializers apply to this process ('fixture' (evtrain.initializer), 'torch' "
        "(evtrain.initializer, from evtrain 0.1.0)) and at most one may be used. Choose one "
        "with plugins.initializer in the config or --initializer NAME, or disable the others "
        "in plugins.disabled."
    )
    assert isinstance(load_initializer(options(initializer="fixture"), found), FixtureInitializer)
    chosen = load_initializer(options(initializer="evtrain.initializer:torch"), found)
    assert isinstance(chosen, TorchInitializer)
    assert isinstance(load_initializer(options(disabled=["torch"]), found), FixtureInitializer)
    assert isinstance(load_initializer(options(disabled=["fixture"]), found), TorchInitializer)
    assert load_initializer(options(initializer="none"), found) is None


def test_an_initializer_that_does_not_apply_is_used_only_when_chosen(no_torchrun: None) -> None:
    assert load_initializer(options(), [TORCH]) is None
    assert isinstance(load_initializer(options(initializer="torch"), [TORCH]), TorchInitializer)


def test_choosing_an_initializer_that_is_not_there_lists_those_that_are() -> None:
    with pytest.raises(PluginError) as info:
        load_initializer(options(initializer="slurm"), [TORCH])
    assert str(info.value) == (
        "initializer 'slurm' is not installed or is disabled (active initializers: 'torch' "
        "(evtrain.initializer, from evtrain 0.1.0)). Choose one of them with "
        "plugins.initializer or --initializer NAME, or 'none' for none."
    )


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        ("broken_initializer", "raised OSError: no network"),
        (
            "not_an_initializer",
            "returned 42, expected an evtrain.distributed.Initializer instance",
        ),
        ("missing_function", "import failed: AttributeError"),
    ],
)
def test_a_failing_initializer_stops_the_run(function: str, reason: str) -> None:
    with pytest.raises(PluginError) as info:
        load_initializer(options(), [initializer("bad", function)])
    assert str(info.value).startswith(f"Initializer 'bad' (evtrain.initializer) failed: {reason}")


def test_initialized_loads_once_and_tears_down(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FixtureInitializer] = []

    def only_fixture(run_options: RunOptions) -> FixtureInitializer:
        made.append(plugin_fixtures.FixtureInitializer())
        return made[-1]

    monkeypatch.setattr("evtrain.run.wiring.load_initializer", only_fixture)
    with initialized(options()) as outer:
        assert active_initializer() is outer is made[0]
        with initialized(options()) as inner:  # learn() inside the CLI's context
            assert inner is outer
        assert made[0].calls == ["load r"]
    assert made[0].calls == ["load r", "teardown"]
    assert active_initializer() is None and len(made) == 1


@pytest.fixture
def no_torchrun(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    yield
    assert not dist.is_initialized()


def test_torch_initializer_outside_torchrun_does_nothing(no_torchrun: None) -> None:
    torch_init = TorchInitializer()
    torch_init.load(options())
    assert not dist.is_initialized() and torch_init.device is None
    torch_init.teardown()


def test_torch_initializer_sets_up_and_destroys_a_gloo_group(
    no_torchrun: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What torchrun --nproc-per-node 1 sets; the two-rank case is tests/test_distributed.py."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    torch_init = TorchInitializer()
    torch_init.load(RunOptions.from_dict({"torch_settings": {"device": "cpu"}}))
    try:
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        world = World.current()
        assert (world.rank, world.size) == (0, 1)
    finally:
        torch_init.teardown()


def test_initializer_flag_overrides_the_config(tmp_path: Any) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("plugins: {initializer: torch}\n")
    args = _parser().parse_args(["learn", str(config), "--initializer", "none"])
    assert options_from_cli(args).plugins.initializer == "none"
    args = _parser().parse_args(["learn", str(config)])
    assert options_from_cli(args).plugins.initializer == "torch"


def test_a_one_process_world_needs_no_process_group() -> None:
    world = World()
    tensor = torch.tensor([1.0, 2.0])
    world.broadcast_(iter([tensor]))
    world.average_(tensor)
    assert tensor.tolist() == [1.0, 2.0]
    assert world.sum([3.0, 4.0]) == [3.0, 4.0]
    assert world.any(False) is False and world.any(True) is True
    assert world.broadcast_object("x") == "x"
    summary = StatsSummary(full_dist=[1.0], aggregation_method=StatsAggregationMethod.SUM)
    assert world.merge_stats({"k": summary}) == {"k": summary}
    assert [t.tolist() for t in world.all_gather(tensor)] == [[1.0, 2.0]]


def test_normalisers_of_two_ranks_merge_to_the_statistics_of_all_batches() -> None:
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=generator) * 4 + 1 for n in (5, 8, 3, 7)]
    everything = ObservationNormalizer((3,), enabled=True)
    for batch in batches:
        everything.update(batch)
    rank0, rank1 = (ObservationNormalizer((3,), enabled=True) for _ in range(2))
    rank0.deferred = rank1.deferred = True
    for batch in batches[:2]:
        rank0.update(batch)
    for batch in batches[2:]:
        rank1.update(batch)
    assert rank0.count.item() == 0  # deferred: nothing merged before merge_ranks
    # what merge_ranks does with the rows all_gather brings from every rank
    rank0.merge_rows([rank0.pending_row(), rank1.pending_row()])
    assert rank0.count.item() == everything.count.item() == 23
    torch.testing.assert_close(rank0.mean, everything.mean)
    torch.testing.assert_close(rank0.var, everything.var)


LAB_MODULE = """
from evtrain.distributed import Initializer


class LabInitializer(Initializer):
    def load(self, options):
        self.device = "cpu"


def lab():
    return LabInitializer()


EVTRAIN_PLUGINS = {"evtrain.initializer": {"lab": lab}}
"""


def test_a_plugins_module_registers_an_initializer(
    tmp_path: Any, no_torchrun: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "lab_setup.py").write_text(LAB_MODULE)
    chosen = load_initializer(options(paths=[str(folder)]))  # torch does not apply here
    assert type(chosen).__name__ == "LabInitializer"
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(PluginError, match=r"^2 initializers apply to this process \('lab' "):
        load_initializer(options(paths=[str(folder)]))
    chosen = load_initializer(options(paths=[str(folder)], initializer="lab"))
    assert type(chosen).__name__ == "LabInitializer"
    assert [p.distribution for p in discover([INITIALIZER], [str(folder)])] == [
        f"path:{folder}",
        "evtrain",
    ]
