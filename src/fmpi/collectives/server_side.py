"""Server-side collectives: barrier and allreduce done by the relay instead of point-to-point.

When every link of a job is relayed (``--channel relay``), a dissemination
barrier or a recursive-doubling allreduce sends each of its log2 N rounds
through the relay box anyway. A relay that can hold state does it in one
round trip per rank instead: fmpi-relay's shared objects (a generation-
numbered Barrier, a Reducer that folds contributions keyed by rank), or
Redis scripts. ``table.py`` picks these forms ("server") for barrier and
allreduce when the job's channel is relay and the rank has a provider.

A *provider* implements the small interface below; its network code lives in
``relay/`` (``dso_collectives.DsoCollectives``, ``redis_collectives.RedisCollectives``)
and reaches the algorithms only through ``Channel.server``, so no file here
imports a socket or redis.

Names and rounds: every communicator has its own objects, named after its
collective context id (``Channel.server_key``), so sub-communicators never
mix; the round (barrier generation) is the call's tag, which every member
numbers alike. Blocking and non-blocking calls count separately (see
``api/intracomm.py``), so each tag space gets its own objects and rounds stay
increasing within one object.

What a server can reduce: the predefined commutative ops on plain numeric
elements (bool, ints, floats, complex; native byte order). Everything else —
``Op.Create``, REPLACE/NO_OP, MAXLOC/MINLOC pairs, structured types, the
pickled lowercase API — takes the point-to-point algorithms. Servers fold
in rank order (0, 1, 2, ...), so the result is bitwise the same on every rank.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..transport.requests import TransportError
from .channel import TAG_BITS, Channel
from .options import AllreduceOptions

# MPI's predefined ops the servers know, by MPI name -> the servers' name.
SERVER_OPS = {
    "SUM": "sum", "PROD": "prod", "MAX": "max", "MIN": "min",
    "BAND": "band", "BOR": "bor", "BXOR": "bxor", "LAND": "land", "LOR": "lor", "LXOR": "lxor",
}


class Provider(Protocol):
    """What a relay offers. Every call blocks until the collective completed (or raises)."""

    kind: str  # "dso" or "redis"
    where: str  # the relay, for messages (no password)
    calls: dict[str, int]  # completed calls per collective (tests check the server path was used)
    errors: tuple[type[BaseException], ...]  # what its calls raise when the relay fails (anything else passes)

    # `deadline` (time.monotonic()): past it, a call still waiting raises one of `errors` with code "timeout".
    def barrier(self, comm_key: str, generation: int, rank: int, size: int, deadline: float | None = None) -> None: ...

    def allreduce(
        self, comm_key: str, round: int, rank: int, size: int, send: np.ndarray, op: str, out: np.ndarray,
        deadline: float | None = None,
    ) -> None:
        """Fold the `size` contributions of this round in rank order into `out` (`send` may be `out`)."""
        ...

    def close(self) -> None: ...


def server_op(op: Any) -> str | None:
    """The servers' name of an ``MPI.Op`` they can apply, or None (user-defined and other ops)."""
    name = getattr(op, "name", None)
    if name not in SERVER_OPS or not getattr(op, "is_predefined", False) or not getattr(op, "commute", False):
        return None
    return SERVER_OPS[name]


def plain_numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biufc" and dtype.fields is None and dtype.subdtype is None and dtype.isnative


def can_run(collective: str, ch: Channel, opts: Any) -> bool:
    """Whether this call may take the server-side form (the same answer on every rank of the call)."""
    if ch.server is None or ch.size < 2:
        return False
    if collective == "barrier":
        return True
    if collective == "allreduce":
        return (
            isinstance(opts, AllreduceOptions)
            and opts.server_op is not None
            and opts.commute
            and plain_numeric(opts.recv.dtype)
            and opts.send.dtype == opts.recv.dtype
        )
    return False


def _key(ch: Channel) -> tuple[str, int]:
    return f"{ch.server_key}.{ch.tag >> TAG_BITS}", ch.tag & ((1 << TAG_BITS) - 1)


def _failed(ch: Channel, what: str, exc: Exception, deadline: float | None) -> TransportError:
    if deadline is not None and getattr(exc, "code", None) == "timeout":
        return ch.server_timed_out(f"a server-side {what}")  # FMPI_TIMEOUT
    where = getattr(ch.server, "where", "the relay")
    # A relay or Redis that ended the call because the job was aborted says so with code "aborted".
    error_class = "ERR_ABORTED" if getattr(exc, "code", None) == "aborted" else getattr(exc, "error_class", "ERR_OTHER")
    return TransportError(f"server-side {what} through {where} failed: {exc}", error_class)


def barrier(ch: Channel, _opts: Any = None) -> None:
    key, generation = _key(ch)
    with ch.server_wait("a server-side barrier") as deadline:
        try:
            ch.server.barrier(key, generation, ch.rank, ch.size, deadline)
        except ch.server.errors as exc:  # a relay or Redis failure: an MPI error for the caller
            raise _failed(ch, "barrier", exc, deadline) from None


def allreduce(ch: Channel, opts: AllreduceOptions) -> None:
    if opts.recv.size == 0:
        barrier(ch)  # nothing to reduce, but it still synchronizes as the point-to-point forms do
        return
    key, round = _key(ch)
    with ch.server_wait("a server-side allreduce") as deadline:
        try:
            ch.server.allreduce(key, round, ch.rank, ch.size, opts.send, opts.server_op, opts.recv, deadline)
        except ch.server.errors as exc:
            raise _failed(ch, "allreduce", exc, deadline) from None
