"""MPI message matching: posted receives against arrived messages.

Matching is by (context, source, tag) with ANY_SOURCE / ANY_TAG wildcards on
the receive side. Both queues are scanned in order, which is what gives MPI's
non-overtaking guarantee: links deliver each sender's frames in order, and the
first matching entry always wins. Queues are kept per context so that traffic
of one communicator never has to be scanned by another.

The matcher holds no lock of its own; the progress engine calls it under its
state lock.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from typing import Generic, Protocol, TypeVar

ANY_SOURCE = -2  # the values MPICH (and so mpi4py on MPICH) uses
ANY_TAG = -1


class Envelope(Protocol):
    """Anything with a matching key: a posted receive's pattern or an arrived message."""

    context: int
    source: int
    tag: int


Pattern = Envelope


P = TypeVar("P", bound=Pattern)
M = TypeVar("M", bound=Envelope)


class Matcher(Generic[P, M]):
    """Two ordered queues per context: receives waiting for a message, messages waiting for a receive."""

    def __init__(self) -> None:
        self._posted: defaultdict[int, list[P]] = defaultdict(list)
        self._unexpected: defaultdict[int, list[M]] = defaultdict(list)
        self._order = itertools.count(1)

    # -- receive side -------------------------------------------------------
    def find_unexpected(self, pattern: Pattern) -> M | None:
        """First arrived message that `pattern` matches, left in place (a probe)."""
        queue = self._unexpected.get(pattern.context)
        if queue:
            for msg in queue:
                if _wants(pattern, msg.source, msg.tag):
                    return msg
        return None

    def take_or_post(self, recv: P) -> M | None:
        """The first arrived message `recv` matches, removed; if there is none, post `recv` and return None."""
        queue = self._unexpected.get(recv.context)
        if queue:
            for i, msg in enumerate(queue):
                if _wants(recv, msg.source, msg.tag):
                    del queue[i]
                    return msg
        recv.order = next(self._order)
        self._posted[recv.context].append(recv)
        return None

    def repost(self, recv: P) -> None:
        """Put back a receive taken by ``take_posted`` at its original place in the queue.

        Used when the frame it was matched to never finished arriving (its
        link failed mid-frame): the resent frame must find the same receive.
        """
        queue = self._posted[recv.context]
        queue.insert(bisect.bisect_left([r.order for r in queue], recv.order), recv)

    def unpost(self, recv: P) -> bool:
        """Withdraw a posted receive (cancel); False if it was already matched."""
        queue = self._posted.get(recv.context)
        if queue:
            for i, r in enumerate(queue):
                if r is recv:
                    del queue[i]
                    return True
        return False

    # -- arrival side -------------------------------------------------------
    def take_posted(self, context: int, source: int, tag: int) -> P | None:
        """Remove and return the first posted receive that accepts this envelope."""
        queue = self._posted.get(context)
        if not queue:
            return None
        for i, recv in enumerate(queue):
            if _wants(recv, source, tag):
                del queue[i]
                return recv
        return None

    def add_unexpected(self, msg: M) -> None:
        self._unexpected[msg.context].append(msg)

    def take_all_unexpected(self, context: int) -> list[M]:
        """Remove and return every arrived message of `context`, in order (an inbox takes them over)."""
        return self._unexpected.pop(context, [])

    # -- failure handling -----------------------------------------------------
    def take_posted_where(self, predicate) -> list[P]:
        """Remove and return every posted receive for which predicate(recv) holds."""
        taken: list[P] = []
        for context, queue in self._posted.items():
            keep = [r for r in queue if not predicate(r)]
            if len(keep) != len(queue):
                taken.extend(r for r in queue if predicate(r))
                self._posted[context] = keep
        return taken

    def pending_counts(self) -> tuple[int, int]:
        return sum(map(len, self._posted.values())), sum(map(len, self._unexpected.values()))


def _wants(pattern: Pattern, source: int, tag: int) -> bool:
    """The MPI matching rule: `pattern` (a receive) accepts a message from `source` with `tag`."""
    return (pattern.source == ANY_SOURCE or pattern.source == source) and (
        pattern.tag == ANY_TAG or pattern.tag == tag
    )
