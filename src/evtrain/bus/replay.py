"""Reading back what a spool inbox holds only on disk: a :class:`Replay` is a range of seqs
the consumer must take from the journal, in order, because the memory window did not keep
them (a full window, a failing or stalled subscriber, an earlier process's backlog).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import attrs

from evtrain.bus.journal import Entry, Journal, logger
from evtrain.bus.records import decode


@attrs.frozen(slots=True)
class Replay:
    """Deliver the journal's records ``first <= seq < end``, in order."""

    first: int
    end: int


def read_back(
    journal: Journal, piece: Replay, since: int, lost: Callable[[int, int], None]
) -> Iterator[Entry]:
    """The events of ``piece`` read from ``journal``, in order (all of it written already); what it
    no longer has (or cannot decode) goes to ``lost(count, through seq)``.  Events before seq
    ``since`` are an earlier process's: their emit times mean nothing here.
    """
    expected = piece.first
    for seq, t, data in journal.read(piece.first, piece.end):
        if seq > expected:
            lost(seq - expected, seq - 1)
        expected = seq + 1
        try:
            payload = decode(data)
        except Exception as error:  # a payload type this process lacks, a crafted record
            logger.error(
                "Journal of subscriber %r: event %d cannot be read back (%s: %s); it is "
                "counted as dropped.",
                journal.label,
                seq,
                type(error).__name__,
                error,
            )
            lost(1, seq)
            continue
        # Emit times of an earlier process mean nothing here: latency counts from now.
        yield seq, t if seq >= since else time.perf_counter(), payload
    if expected < piece.end:
        lost(piece.end - expected, piece.end - 1)
