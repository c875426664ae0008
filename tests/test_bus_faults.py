"""The bus under misbehaving subscribers: hung, emitting into themselves, raising
``SystemExit``/``KeyboardInterrupt``; and Ctrl-C while it waits on one (docs/delivery.md)."""

from __future__ import annotations

import re
import signal
import subprocess
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import attrs
import pytest
import yaml

from evtrain import (
    Bus,
    BusTimeoutError,
    RunStatus,
    StatsEvent,
    SubscriberFailed,
    SubscriberStalled,
    signals,
)
from evtrain.bus import SubscriberSettings
from evtrain.config.options import RunOptions
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import isolated_python, stats_event

WAIT_S = 60.0
"""Generous bound for anything a test waits on; never reached when the code is right."""


class Hung:
    """A sync subscriber that records each event, then hangs on the first until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        self.steps.append(event.step)
        self.entered.set()
        self.release.wait()


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn`` on a daemon thread; the returned callable joins it (within ``WAIT_S``) and
    returns its result, or fails the test if it is still running (a deadlock)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{fn} did not return within {WAIT_S} s"
        return result[0]

    return join


@pytest.fixture
def hung() -> Iterator[Hung]:
    subscriber = Hung()
    yield subscriber
    subscriber.release.set()  # lets its worker thread end


# -- block_timeout ---------------------------------------------------------------------------


def test_block_gives_up_after_block_timeout_drops_counts_and_reports_a_stall(
    hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(capacity=2, block_timeout=0.2, stall_timeout=600)
    stalls = Recorder()
    bus.connect(signals.subscriber_stalled, stalls, name="stalls")
    bus.connect(signals.stats, hung, name="hung")
    bus.emit(signals.stats, stats_event(0))
    assert hung.entered.wait(WAIT_S)  # step 0 in flight: the inbox holds 2 more

    def emit_more() -> None:
        for step in range(1, 6):  # 1, 2 queued; 3 waits block_timeout, dropped; 4, 5 dropped
            bus.emit(signals.stats, stats_event(step))

    in_thread(emit_more)()  # returns: emit never waits forever
    assert bus.metrics()["hung"].dropped == 3
    # Once it takes from its inbox again, block waits (and loses nothing) as before.
    hung.release.set()
    bus.flush(timeout=WAIT_S)
    bus.emit(signals.stats, stats_event(6))
    report = bus.close(timeout=WAIT_S)
    assert hung.steps == [0, 1, 2, 6]
    assert report.clean
    assert bus.metrics()["hung"].dropped == 3 and bus.metrics()["hung"].delivered == 4
    [stall] = stalls.of(SubscriberStalled)
    assert attrs.evolve(stall, seconds=0.0) == SubscriberStalled(
        subscriber="hung",
        signal="stats",
        seconds=0.0,
        stall_timeout=0.2,
        spool=False,
        inbox_full=True,
    )
    assert stall.seconds >= 0.2
    [message] = [m for m in caplog.messages if "full inbox" in m]
    assert message == (
        f"Subscriber 'hung' took nothing from its full inbox (capacity 2) for "
        f"{stall.seconds:.1f} s (block_timeout 0.2 s): this 'stats' event and later ones are "
        "dropped until it does; training goes on."
    )


def test_block_timeout_per_connect_and_per_subscriber_name(tmp_path: Path) -> None:
    # bus.subscribers.<name> in a run's options, as make_bus hands it to the bus
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"results_dir": str(tmp_path), "run_id": "r"},
            "bus": {"subscribers": {"named": {"block_timeout": 0.1}}},
        }
    )
    assert options.bus.subscribers == {"named": SubscriberSettings(block_timeout=0.1)}
    bus = Bus(block_timeout=600, subscribers=options.bus.subscribers)
    bus.connect(signals.stats, lambda e: None, name="a", block_timeout=0.3)
    bus.connect(signals.stats, lambda e: None, name="named", block_timeout=0.3)
    bus.connect(signals.stats, lambda e: None, name="c")
    timeouts = {s.name: s.inbox.block_timeout for s in bus.subscriptions}  # type: ignore[union-attr]
    assert timeouts == {"a": 0.3, "named": 0.1, "c": 600}
    bus.close(timeout=WAIT_S)


# -- a handler emitting into its own inbox ---------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_emitting_a_burst_into_its_own_full_inbox_does_not_deadlock(
    kind: str,
) -> None:
    bus = Bus(capacity=2)  # a wait of block_timeout would show as dropped events
    seen: list[int] = []

    def handle(event: StatsEvent) -> None:
        seen.append(event.step)
        if event.step == 0:
            for step in range(100, 110):  # five times the capacity, into its own inbox
                bus.emit(signals.stats, stats_event(step))

    async def handle_async(event: StatsEvent) -> None:
        handle(event)

    bus.connect(signals.stats, handle if kind == "sync" else handle_async, name="echo")
    bus.emit(signals.stats, stats_event(0))
    try:
        bus.flush(timeout=WAIT_S)
    finally:
        report = bus.close(timeout=5)
    assert seen == [0, *range(100, 110)]
    assert report.clean
    assert bus.metrics()["echo"].dropped == 0


# -- close() is bounded ----------------------------------------------------------------------


def hung_async(entered: threading.Event) -> Callable[[StatsEvent], Any]:
    async def hang(event: StatsEvent) -> None:
        entered.set()
        await anyio.sleep_forever()

    return hang


def blocking_the_loop(entered: threading.Event, release: threading.Event) -> Any:
    async def block(event: StatsEvent) -> None:
        entered.set()
        release.wait()  # not awaited: the whole dispatcher loop stands still

    return block


@pytest.mark.parametrize("kind", ["sync", "async", "async blocking the loop"])
def test_close_without_timeout_returns_within_drain_timeout_and_names_who_was_left(
    kind: str, hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(drain_timeout=0.5, stall_timeout=600)
    subscriber: Callable[[StatsEvent], Any] = {
        "sync": hung,
        "async": hung_async(hung.entered),
        "async blocking the loop": blocking_the_loop(hung.entered, hung.release),
    }[kind]
    bus.connect(signals.stats, subscriber, name="hung")
    for step in range(3):
        bus.emit(signals.stats, stats_event(step))
    assert hung.entered.wait(WAIT_S)
    report = in_thread(bus.close)()
    assert report.timed_out == ("hung",)
    assert report.undelivered == {"hung": 3}
    assert bus.closed
    assert caplog.messages[-1] == (
        "Bus closed before its subscribers finished: 'hung' (3 events undelivered, still "
        "running, abandoned)"
    )


def test_close_left_hanging_in_a_close_hook_says_so_not_an_empty_dict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    seen: list[int] = []

    def writer(event: StatsEvent) -> None:
        seen.append(event.step)

    writer.close = release.wait  # type: ignore[attr-defined]
    try:
        with Bus(drain_timeout=0.5, stall_timeout=600) as bus:  # the README's form
            bus.connect(signals.stats, writer, name="writer")
            bus.emit(signals.stats, stats_event(1))
    finally:
        release.set()
    assert seen == [1]
    assert caplog.messages[-1] == (
        "Bus closed before its subscribers finished: 'writer' (still running, abandoned)"
    )


def test_the_readme_with_bus_form_returns_with_a_hung_subscriber(hung: Hung) -> None:
    def use() -> bool:
        with Bus(drain_timeout=0.5, stall_timeout=600) as bus:
            bus.connect(signals.stats, hung, name="hung")
            bus.emit(signals.stats, stats_event(1))
            assert hung.entered.wait(WAIT_S)
        return bus.closed

    assert in_thread(use)() is True


def test_disconnect_without_timeout_is_bounded_by_drain_timeout_too(hung: Hung) -> None:
    bus = Bus(drain_timeout=0.3, stall_timeout=600)
    handle = bus.connect(signals.stats, hung, name="hung")
    bus.emit(signals.stats, stats_event(1))
    assert hung.entered.wait(WAIT_S)

    def leave() -> str:
        # the handle's with form disconnects on exit
        with pytest.raises(BusTimeoutError) as info, handle:
            pass
        return str(info.value)

    assert in_thread(leave)() == "subscriber 'hung' did not finish within 0.3s"
    assert not handle.active
    bus.close(timeout=WAIT_S)


# -- KeyboardInterrupt / SystemExit from a subscriber ----------------------------------------


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_system_exit_or_keyboard_interrupt_from_a_subscriber_is_its_failure(
    error: type[BaseException], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def stop(event: StatsEvent) -> None:
        seen.append(event.step)
        if event.step == 1:
            raise error(3)

    async def stop_async(event: StatsEvent) -> None:
        stop(event)

    failures = Recorder()
    bus = Bus(stall_timeout=600)
    bus.connect(signals.subscriber_failed, failures, name="failures")
    bus.connect(signals.stats, stop if kind == "sync" else stop_async, name="stopper")
    try:
        for step in range(3):
            bus.emit(signals.stats, stats_event(step))
        bus.flush(timeout=WAIT_S)
        report = bus.close(timeout=WAIT_S)
    except BaseException as escaped:  # the point: nothing escapes to the producer
        pytest.fail(f"{escaped!r} escaped from the bus to the producer")
    assert seen == [0, 1, 2]  # isolated: the subscriber goes on with the next event
    assert report.clean
    assert bus.metrics()["stopper"].failed == 1
    assert failures.of(SubscriberFailed) == [
        SubscriberFailed(
            subscriber="stopper",
            signal="stats",
            error="3",
            error_type=error.__name__,
            count=1,
            disabled=False,
        )
    ]
    assert "Subscriber 'stopper' raised handling 'stats'; training continues." in caplog.messages


def test_a_run_goes_on_past_subscribers_raising_system_exit_and_keyboard_interrupt(
    tmp_path: Path,
) -> None:
    def exits(event: StatsEvent) -> None:
        raise SystemExit(1)

    async def interrupts(event: Any) -> None:
        raise KeyboardInterrupt

    config = {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 512,
                "time_horizon": 32,
                "summary_freq": 128,
                "checkpoint_interval": 256,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    with Bus(stall_timeout=600) as bus:
        bus.connect(signals.stats, exits, name="exits")
        bus.connect(signals.save, interrupts, name="interrupts")
        result = learn(config, bus)
        metrics = bus.metrics()
    run = tmp_path / "results" / "run"
    assert result.status is RunStatus.COMPLETED
    assert result.steps == {"CartPole": 512}
    assert result.models == {"CartPole": run / "CartPole.onnx"}
    assert (run / "CartPole.onnx").is_file() and (run / "CartPole" / "checkpoint.pt").is_file()
    assert (metrics["exits"].failed, metrics["exits"].delivered) == (4, 4)  # 128..512
    assert (metrics["interrupts"].failed, metrics["interrupts"].delivered) == (2, 2)  # 256, 512


# -- Ctrl-C ----------------------------------------------------------------------------------

BARE_BUS = textwrap.dedent(
    """
    import threading
    from evtrain import Bus, StatsEvent, signals

    entered = threading.Event()

    def hung(event):
        print("subscriber hangs", flush=True)
        entered.set()
        threading.Event().wait()

    with Bus(capacity=2, block_timeout=600, drain_timeout=600, stall_timeout=600) as bus:
        bus.connect(signals.stats, hung, name="hung")
        for step in range(10):
            print(f"emitting {step}", flush=True)
            bus.emit(signals.stats, StatsEvent(category="C", step=step, values={}))
            entered.wait()  # 0 is in the subscriber: 1 and 2 fill its inbox, 3 blocks
    """
)


def read_until(proc: subprocess.Popen[str], stream: IO[str], *texts: str, seen: list[str]) -> None:
    """Read lines of ``proc``'s ``stream`` until each of ``texts`` was in one (in any order);
    a process that says none of them within 300 s is killed, which fails the test."""
    waiting = set(texts)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        for line in stream:
            seen.append(line)
            waiting = {text for text in waiting if text not in line}
            if not waiting:
                return
    finally:
        watchdog.cancel()
    raise AssertionError(f"{waiting} never came; got {''.join(seen)}")


def test_ctrl_c_stops_a_blocked_emit_then_a_draining_close(tmp_path: Path) -> None:
    # Timeouts of 600 s: only Ctrl-C can end this script within the test's bound.
    proc = subprocess.Popen(
        [isolated_python(), "-W", "always::ResourceWarning", "-c", BARE_BUS],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    err: list[str] = []
    try:
        read_until(proc, proc.stdout, "subscriber hangs", "emitting 3", seen=out)
        proc.send_signal(signal.SIGINT)  # out of the blocked emit, into close()
        read_until(proc, proc.stderr, "Closing the bus: waiting up to", seen=err)
        proc.send_signal(signal.SIGINT)  # out of the draining close
        rest_out, rest_err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    stderr = "".join(err) + rest_err
    assert proc.returncode == -signal.SIGINT, stderr
    assert sorted(("".join(out) + rest_out).splitlines()) == [
        *(f"emitting {step}" for step in range(4)),
        "subscriber hangs",
    ]
    lines = stderr.splitlines()
    [notice] = [line for line in lines if line.startswith("Closing the bus")]
    assert re.fullmatch(
        r"Closing the bus: waiting up to 59\d s more for 'hung' \(Ctrl-C stops waiting\)\.",
        notice,
    )
    assert (
        "Bus closed before its subscribers finished (KeyboardInterrupt): 'hung' (3 events "
        "undelivered, still running, abandoned)"
    ) in lines
    assert lines[-1] == "KeyboardInterrupt"
    assert "never closed" not in stderr  # the interrupted close closed it: no exit-time drain


LEARN_SCRIPT = textwrap.dedent(
    """
    import logging, sys, threading, yaml
    from evtrain import Bus, signals
    from evtrain.run.learn import learn

    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    def hung(event):
        print(f"subscriber hangs at step {event.step}", flush=True)
        threading.Event().wait()

    with Bus(capacity=1, block_timeout=1, drain_timeout=1, stall_timeout=600) as bus:
        bus.connect(signals.stats, hung, name="hung")
        result = learn(yaml.safe_load(open(sys.argv[1])), bus)
        print(f"status {result.status.value} at {result.steps['CartPole']}", flush=True)
    print("bus closed", flush=True)
    """
)


def test_ctrl_c_stops_a_run_whose_subscriber_hangs_and_it_saves(tmp_path: Path) -> None:
    config = {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 10_000_000,
                "time_horizon": 32,
                "summary_freq": 128,
                "checkpoint_interval": 10_000_000,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "bus": {"drain_timeout": 1},
    }
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [isolated_python(), "-c", LEARN_SCRIPT, "long.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    err: list[str] = []
    try:
        read_until(proc, proc.stdout, "subscriber hangs at step 128", seen=out)
        # 256 fills its inbox; the emit of 384 gives up after block_timeout: training goes on
        read_until(proc, proc.stderr, "took nothing from its full inbox", seen=err)
        proc.send_signal(signal.SIGINT)
        rest_out, rest_err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    stderr = "".join(err) + rest_err
    assert proc.returncode == 0, stderr
    lines = ("".join(out) + rest_out).splitlines()
    assert lines[0] == "subscriber hangs at step 128" and lines[-1] == "bus closed"
    assert lines[-2].startswith("status interrupted at ")
    steps = int(lines[-2].rsplit(" ", 1)[1])
    assert steps >= 384
    assert "SIGINT received: finishing the current update, then saving and exporting." in stderr
    run = tmp_path / "results" / "run"
    assert (run / "CartPole.onnx").is_file()
    assert (run / "CartPole" / f"CartPole-{steps}.pt").is_file()
    assert re.fullmatch(
        r"Subscriber 'hung' took nothing from its full inbox \(capacity 1\) for \d+\.\d s "
        r"\(block_timeout 1 s\): this 'stats' event and later ones are dropped until it does; "
        r"training goes on\.\n",
        err[-1],
    )
    # 128 in the subscriber, 256 in its inbox: the rest was dropped, and counted so
    assert stderr.splitlines()[-1] == (
        "Bus closed before its subscribers finished: 'hung' (2 events undelivered, still "
        "running, abandoned)"
    )
