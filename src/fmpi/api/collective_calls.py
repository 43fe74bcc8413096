"""How a communicator runs its collective calls: numbered tags, blocking calls in the caller's
thread, non-blocking ones on the communicator's background worker.

Every collective call is numbered by a per-communicator counter, which all
members advance alike because MPI has them make the same collective calls in
the same order; the number is the call's tag in the communicator's
collective context. Blocking calls use tags below 2**29, non-blocking ones
(counted separately, run by the background worker) the next 2**29, so the
two kinds can never match each other's messages.

Mixed into ``Intracomm`` and ``Intercomm``; each says what a call's channel is
(``_make_channel``): a ``Channel`` over the group for the one, a pair of them
(local group, both groups) for the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..collectives.channel import TAG_BITS
from ..transport.requests import TransportError
from .nonblocking import Worker
from .request import Request

# Tags of collective calls: blocking calls cycle through [0, 2**29), non-blocking ones through [2**29, 2**30).
TAG_SPACE = 1 << TAG_BITS

T = TypeVar("T")


class CollectiveCalls:
    """Needs ``_engine``, ``_ctx``, ``_name``, ``_coll_seq``, ``_transport_failed`` (``Comm``) and ``_make_channel``."""

    _nb_seq = 0
    _worker: Worker | None = None

    def _make_channel(self, tag: int) -> Any:
        raise NotImplementedError

    def _channel(self) -> Any:
        """The channel of the next blocking collective call."""
        self._coll_seq += 1
        return self._make_channel(self._coll_seq % TAG_SPACE)

    def _collective(self, fn: Callable[[Any], T]) -> T:
        """Run one blocking collective call; transport failures become MPI.Exception."""
        ch = self._channel()
        try:
            return fn(ch)
        except TransportError as exc:
            self._transport_failed(exc)

    _blocking = _collective

    def _nonblocking(self, fn: Callable[[Any], None]) -> Request:
        """Start `fn` on the background worker; a Request completes when it has run."""
        self._nb_seq += 1
        ch = self._make_channel(TAG_SPACE + self._nb_seq % TAG_SPACE)
        if self._worker is None:
            self._worker = Worker(f"fmpi-coll-{self._name or hex(self._ctx)}")
        op = self._worker.submit(self._engine, lambda: fn(ch))
        return Request(self._engine, op)

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
