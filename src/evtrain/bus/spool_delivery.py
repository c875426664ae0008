"""Delivering a ``spool`` subscriber's events: transient failures are retried on a short fixed
interval, permanent rejections are dead-lettered, and the console hears of each outage once.

A sink that fails (a connection refused, a timeout, a 5xx: any exception) is *down*: its event
stays journaled and later ones wait behind it, in order.  While it is down the subscriber's
``probe`` hook — a cheap request, e.g. MLflow's experiment lookup — is called every
``retry_backoff_s`` (fixed: no doubling, so recovery is noticed within one interval); once a
probe answers, the event is tried again.  A subscriber without ``probe`` has its event tried
again every ``retry_backoff_s``.  The outage is logged as one WARNING when it begins (the
error, no traceback unless the ``evtrain`` logger is at DEBUG) and one when it ends (how long
it lasted, how many events wait in the journal), and emitted once as ``subscriber_failed``.

A subscriber that raises :class:`~evtrain.errors.PermanentDeliveryError` says its sink
refused the event for good: the event (or only its ``keys``) is written to
``dead_letter/<subscriber>.jsonl`` beside the journals (``run_logs/dead_letter/`` in a run)
with the reason, counted (``SubscriberMetrics.dead_lettered``), acknowledged, and the next
event flows.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import attrs

from evtrain.bus.delivery import (
    FailureContext,
    FailurePolicy,
    _isolated,
    _pass_marker,
    failure_event,
    isolable,
    run_to_end,
)
from evtrain.bus.inbox import Marker
from evtrain.bus.journal import Entry
from evtrain.bus.spool import Replay, SpoolInbox, SpoolItem
from evtrain.bus.subscription import Subscription
from evtrain.errors import PermanentDeliveryError
from evtrain.events.payloads import StopRun

logger = logging.getLogger("evtrain.bus")

_dead_letter_lock = threading.Lock()


async def deliver_spool(
    sub: Subscription, inbox: SpoolInbox, batch: list[SpoolItem], failures: FailureContext
) -> None:
    """Hand a spool subscriber's ``batch`` over in order: live events from memory, replays
    read from its journal, markers; each event retried until it succeeds or is dead-lettered.

    An event is acknowledged (its journal may drop it) only once its sink says it is durable:
    a subscriber with a ``flush`` hook (a writer) is flushed at the end of the batch and
    before each marker, and what it took before a flush that returned is acknowledged then."""
    unsynced: list[tuple[int, bool]] = []
    for item in batch:
        if isinstance(item, Marker):
            await _acknowledge(sub, inbox, failures, unsynced)
            await _pass_marker(sub, failures, item)
        elif isinstance(item, Replay):
            for entry in inbox.replay(item):
                if not await _until_delivered(sub, inbox, failures, entry, unsynced, True):
                    return
        elif not await _until_delivered(sub, inbox, failures, item, unsynced, False):
            return
    await _acknowledge(sub, inbox, failures, unsynced)


def deliver_spool_sync(
    sub: Subscription, inbox: SpoolInbox, batch: list[SpoolItem], failures: FailureContext
) -> None:
    """:func:`deliver_spool` for a sync subscriber, on its worker thread."""
    run_to_end(sub, deliver_spool(sub, inbox, batch, failures))


async def _acknowledge(
    sub: Subscription, inbox: SpoolInbox, failures: FailureContext, unsynced: list[tuple[int, bool]]
) -> None:
    """Flush the sink, then acknowledge the events ``unsynced`` lists (``(seq, replayed)``);
    a flush that raises leaves them in the journal (a later flush acknowledges them)."""
    if unsynced and await _isolated(sub, failures, "flush", sub.hooks["flush"]):
        for seq, replayed in unsynced:
            inbox.acknowledge(seq, replayed=replayed)
        unsynced.clear()


async def _until_delivered(
    sub: Subscription,
    inbox: SpoolInbox,
    failures: FailureContext,
    entry: Entry,
    unsynced: list[tuple[int, bool]],
    replayed: bool,
) -> bool:
    """Deliver one event, retrying it while its sink is down; ``False`` once the bus gave up
    on the subscriber (the event stays in the journal).  A sink with a ``flush`` hook has
    the event noted in ``unsynced`` (acknowledged after its next flush), others acknowledge
    it at once; so is a dead-lettered one."""
    seq, t, payload = entry
    call, awaited = sub.call, sub.is_async
    while not (inbox.abandoned or sub.finished):
        sub.begin(payload)
        try:
            result = (await call(payload)) if awaited else call(payload)
        except PermanentDeliveryError as refused:
            sub.end()
            _dead_letter(sub, inbox, seq, payload, refused)
            if refused.keys:  # the rest of the event went through
                sub.handled(t, ok=True)
        except isolable() as error:
            sub.end()
            sub.count_failure()
            if inbox.down_since is None:
                _went_down(sub, inbox, failures, payload, error)
            if not await _until_answering(sub, inbox, failures):
                break
            sub.count_retry()
            continue
        else:
            sub.handled(t, ok=True)
            if type(result) is StopRun:
                failures.request_stop(result.reason, sub.name)
        if "flush" in sub.hooks:
            unsynced.append((seq, replayed))
        else:
            inbox.acknowledge(seq, replayed=replayed)
        if inbox.down_since is not None:
            _came_back(sub, inbox)
        return True
    return False


async def _until_answering(sub: Subscription, inbox: SpoolInbox, failures: FailureContext) -> bool:
    """Wait one ``retry_backoff_s``, then (with a ``probe`` hook) probe every interval until
    the sink answers; ``False`` once the bus gave up on the subscriber."""
    probe = sub.hooks.get("probe")
    every = failures.retry_backoff_s
    while True:
        if sub.is_async:
            await _sleep_unless_closed(inbox, every)
        elif inbox.wait_closed(every):
            return False
        if inbox.abandoned or sub.finished:
            return False
        if probe is None:
            return True
        sub.begin("probe")
        try:
            answer = probe()
            if sub.is_async and hasattr(answer, "__await__"):
                await answer
        except isolable():
            sub.end()
            continue
        sub.end()
        return True


def _went_down(
    sub: Subscription,
    inbox: SpoolInbox,
    failures: FailureContext,
    payload: Any,
    error: BaseException,
) -> None:
    """The sink stopped taking events: say so once, emit ``subscriber_failed`` once, and keep
    later events in the journal only."""
    inbox.hold(failing=True)
    inbox.down_since = time.monotonic()
    inbox.down_at = time.time()
    every = failures.retry_backoff_s
    how = "probed" if "probe" in sub.hooks else "retried"
    logger.warning(
        "Subscriber %r is down since %s (%s: %s); its events are kept in its journal and "
        "delivery is %s every %g s.",
        sub.name,
        time.strftime("%H:%M:%S", time.localtime(inbox.down_at)),
        type(error).__name__,
        error,
        how,
        every,
        exc_info=error if logging.getLogger("evtrain").isEnabledFor(logging.DEBUG) else None,
    )
    signal = sub.signal_name(payload)
    if failures.policy is FailurePolicy.RAISE:
        failures.raise_later(sub.name, signal, error)
    failures.report(failure_event(sub, signal, error, disabled=False, retry_in=every))


def _came_back(sub: Subscription, inbox: SpoolInbox) -> None:
    """The sink took an event again: say so once; the journal's backlog follows in order."""
    down_since = inbox.down_since
    inbox.down_since = None
    inbox.hold(failing=False)
    waiting = inbox.journaled
    logger.warning(
        "Subscriber %r is back after %.1f s; %d event%s journaled meanwhile %s delivered now.",
        sub.name,
        time.monotonic() - (down_since or time.monotonic()),
        waiting,
        "" if waiting == 1 else "s",
        "is" if waiting == 1 else "are",
    )


def dead_letter_path(inbox: SpoolInbox) -> Path:
    """``dead_letter/<subscriber>.jsonl`` beside the journals' folder (``run_logs/`` in a
    run: the journals are in ``run_logs/journal/``)."""
    folder = inbox.journal.folder
    root = folder.parent.parent if folder.parent.name == "journal" else folder.parent
    return root / "dead_letter" / f"{folder.name}.jsonl"


def _dead_letter(
    sub: Subscription, inbox: SpoolInbox, seq: int, payload: Any, refused: PermanentDeliveryError
) -> None:
    """Append one record for ``payload`` (or its refused keys) to the dead-letter file and
    count it; said as one WARNING line naming its journal record (``seq``)."""
    inbox.dead_lettered += 1
    path = dead_letter_path(inbox)
    record = {
        "seq": seq,
        "signal": sub.signal_name(payload),
        "time": getattr(payload, "time", None),
        "reason": refused.reason,
        "keys": list(refused.keys),
        "event": _plain(payload),
    }
    line = json.dumps(record, default=str, sort_keys=True) + "\n"
    try:
        with _dead_letter_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as file:
                file.write(line)
    except OSError as error:
        logger.error("Subscriber %r: cannot write %s (%s)", sub.name, path, error)
    what = f"keys {', '.join(refused.keys)} of its event" if refused.keys else "an event"
    logger.warning(
        "Subscriber %r refused %s %r (journal record %d) for good (%s); written to %s, later "
        "events go on.",
        sub.name,
        what,
        record["signal"],
        seq,
        refused.reason,
        path,
    )


def _plain(payload: Any) -> Any:
    """``payload`` as JSON-able data (an attrs event as its fields)."""
    if attrs.has(type(payload)):
        return {"type": type(payload).__name__, **attrs.asdict(payload, recurse=True)}
    return payload


async def _sleep_unless_closed(inbox: SpoolInbox, seconds: float) -> None:
    """An async subscriber's wait, on the loop: ends early once the bus gives up."""
    with anyio.move_on_after(seconds):
        while not inbox.abandoned:
            await anyio.sleep(0.05)
