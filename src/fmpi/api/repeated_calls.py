"""A communicator's last small Allreduce, kept ready for the next identical call.

An iterative program calls ``comm.Allreduce(local, total, op=MPI.SUM)`` with
the very same arrays every iteration. For a small vector, parsing the
message specs, checking the operation and consulting the algorithm table
cost about as much CPU as the exchange itself (~10 µs of CPython a call),
and on a worker with a fraction of a CPU that is latency. So a
communicator remembers its last small Allreduce and reuses its options and
algorithm, planned once (``table.prepare``: recursive doubling keeps its
steps and scratch vector), when the next call passes

* the same send and receive objects (``is``: numpy arrays, or ``IN_PLACE``),
* still with the dtype, shape and strides they had, the receive array still
  writable,
* the same ``Op`` object,
* while the collective table's settings are unchanged (``table.generation``).

Anything else is parsed from scratch, as before. Only messages up to
``MEMO_MAX`` bytes are remembered: the memo keeps its arrays alive (a large
one would keep its memory after the program dropped it), and for large
messages the saving is lost in the transfer anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..collectives import table
from ..collectives.channel import Channel
from ..collectives.options import AllreduceOptions

#: Largest vector (bytes) whose Allreduce is remembered.
MEMO_MAX = 64 * 1024


def _layout(arr: np.ndarray) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    return arr.dtype, arr.shape, arr.strides


class AllreduceMemo:
    __slots__ = ("_sendbuf", "_recvbuf", "_op", "_send_layout", "_recv_layout", "_generation", "_opts", "_algorithm", "_run", "_server")

    def __init__(self, sendbuf: Any, recvbuf: np.ndarray, op: Any, opts: AllreduceOptions) -> None:
        self._sendbuf = sendbuf
        self._recvbuf = recvbuf
        self._op = op
        self._send_layout = _layout(sendbuf) if type(sendbuf) is np.ndarray else None
        self._recv_layout = _layout(recvbuf)
        self._generation = table.generation()
        self._opts = opts
        # Picked and planned on the first run, when the channel says whether a server is there.
        self._algorithm: str | None = None
        self._run: Callable[[Channel], None] | None = None
        self._server = False

    @staticmethod
    def worth_it(sendbuf: Any, recvbuf: Any, opts: AllreduceOptions) -> bool:
        """Whether a call with these arguments may be remembered (`opts` parsed from them)."""
        return (
            type(recvbuf) is np.ndarray
            and opts.recv.nbytes <= MEMO_MAX
            and (type(sendbuf) is np.ndarray or opts.send is opts.recv)  # (arrays, or in place)
        )

    def fits(self, sendbuf: Any, recvbuf: Any, op: Any) -> bool:
        """This call is the remembered one again."""
        # (``_layout`` written out: this runs on every call)
        return (
            sendbuf is self._sendbuf
            and recvbuf is self._recvbuf
            and op is self._op
            and self._generation == table.generation()
            and (recvbuf.dtype, recvbuf.shape, recvbuf.strides) == self._recv_layout
            and recvbuf.flags.writeable
            and (self._send_layout is None or (sendbuf.dtype, sendbuf.shape, sendbuf.strides) == self._send_layout)
        )

    @property
    def algorithm(self) -> str | None:
        """The name of the algorithm the remembered call runs (None before its first run)."""
        return self._algorithm

    def run(self, ch: Channel) -> None:
        server = ch.server is not None
        run = self._run
        if run is None or server != self._server:
            opts = self._opts
            self._algorithm = table.pick("allreduce", ch, opts, opts.recv.nbytes, opts.commute)
            run = self._run = table.prepare("allreduce", self._algorithm, ch, opts)
            self._server = server
        run(ch)
