"""The target side of one-sided communication: what applies the origins' requests to a rank's window memory.

fmpi has no NIC that writes into a peer's memory, so a window emulates RMA with messages, as MPICH's ch3 does
over TCP: origins send requests on the window's own communicator, and the target applies them to its memory
in arrival order and answers. The requests go to an *inbox* of the engine (``transport/inbox.py``): the thread
that reads one off the link — the progress thread, or a thread of the program that reads its links while it
waits — applies it and sends the answer on the spot (a service thread of its own cost a thread switch per
request). That gives MPI's guarantees:

* passive target (``Lock``/``Put``/``Unlock``) progresses while the target's program computes or blocks in
  another call — the engine's progress thread, not the program, answers;
* one origin's operations are applied in the order it issued them (MPI's non-overtaking rule on one
  communicator; the inbox serves them in order), so a FLUSH answered means everything that origin sent
  before it is in the memory — and so does any answer (a GET's, ...), which lets the origin skip a Flush;
* one request is applied at a time (a mutex), so each accumulate is atomic with respect to every other RMA
  operation on the window, as MPI requires of ``Accumulate``, ``Get_accumulate``, ``Fetch_and_op`` and
  ``Compare_and_swap``;
* locks are granted here, in request order (an exclusive lock waits for the holders to leave). An origin's
  ``Lock`` does not wait for the grant (MPI allows it to return first, and MPICH does so too): what the
  origin sends while its lock waits is held here and applied, in order, once the lock is granted.

An error at the target (a displacement outside an attached region of a dynamic window) cannot interrupt an
origin that has moved on; it is kept and sent back with that origin's next FLUSH or UNLOCK answer.

A new window's inbox is held until its rank's program next calls into the engine (``release``): MPICH applies
nothing before the target's next MPI call, and mpi4py's nxtval demo stores into its fresh window first.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

import numpy as np

from ..transport.requests import TransportError
from ..wire import pickle_oob as serialize
from . import op as ops
from .buffers import message
from .collspecs import simple
from .datatypes import Datatype
from .rma_constants import LOCK_EXCLUSIVE

# Request kinds (the tag of a request on the window's request communicator).
PUT, GET, ACC, GET_ACC, CAS, LOCK, UNLOCK, FLUSH = range(1, 9)
# The reply tag of a request nobody waits for (a lazy LOCK: its origin goes on at once).
NO_ANSWER = 0
# A request's tag is its kind and the origin's fence epoch (win_fence): kind | epoch << KIND_BITS.
KIND_BITS = 4
EPOCHS = 1 << 20  # epochs are counted modulo this (tags stay within MPI's 29 bits)


def request_tag(kind: int, epoch: int) -> int:
    return kind | (epoch % EPOCHS) << KIND_BITS

# Where a displacement lands: (the memory, the byte offset in it) — or a ValueError.
Locate = Callable[[int], tuple[memoryview, int]]


class RmaError(Exception):
    """A request the target could not apply; its text goes back to the origin."""


class TargetService:
    """Applies RMA requests to one rank's window memory (see the module docstring)."""

    def __init__(self, requests: Any, replies: Any, locate: Locate) -> None:
        self._requests = requests  # the window's request communicator (api Comm): its messages come to ``_serve``
        self._replies = replies  # where answers go, tagged with the origin's reply tag
        self._locate = locate
        self._holders: dict[int, int] = {}  # origin -> lock type it holds
        self._waiting: deque[tuple[int, int, int]] = deque()  # (origin, lock type, reply tag), in request order
        self._errors: dict[int, str] = {}  # origin -> the first error of its operations since its last flush
        self._held: dict[int, list[tuple[int, tuple]]] = {}  # origin whose lock waits -> its requests since, in order
        self._mutex = threading.Lock()  # one operation at a time: a reader's, or the own rank's (``local``)
        self._applied: dict[int, int] = {}  # fence epoch -> PUTs and ACCs of origins applied in it (win_fence)
        self._awaited: tuple[int, int, int] | None = None  # (epoch, count, tag): the own Fence waits for them
        self._engine = requests._engine
        # The engine's reader threads serve the requests (transport/inbox.py); held until ``release``.
        self._inbox = self._engine.inboxes.open(requests._ctx, self._serve)

    def release(self) -> None:
        """The rank's program made an MPI call since the window was created: apply the origins' requests
        (those that came before first, in arrival order)."""
        self._inbox.release()

    def close(self) -> None:
        """The window is freed (every origin is past its last epoch: nothing more comes)."""
        self._engine.inboxes.close(self._requests._ctx)

    # ------------------------------------------------------------------ requests
    def _serve(self, source: int, tag: int, payload: Any) -> None:
        """One request, in the thread that read it (transport/inbox.py: never blocks)."""
        args = serialize.loads(payload)
        with self._mutex:
            self._handle(self._requests._comm_rank(source), tag & ((1 << KIND_BITS) - 1), args, tag >> KIND_BITS)

    def reached(self, epoch: int, count: int, tag: int) -> bool:
        """Whether `count` PUTs and ACCs of `epoch` are applied; if not, this rank gets a message (``replies``,
        `tag`) when the last one is. The epoch's count is then forgotten (its fence is over)."""
        epoch %= EPOCHS
        with self._mutex:
            if self._applied.get(epoch, 0) >= count:
                self._applied.pop(epoch, None)
                return True
            self._awaited = (epoch, count, tag)
            return False

    def _count(self, epoch: int) -> None:
        """A PUT or an ACC of `epoch` is applied (mutex held)."""
        self._applied[epoch] = done = self._applied.get(epoch, 0) + 1
        if self._awaited is not None and self._awaited[:2] == (epoch, done):
            self._applied.pop(epoch)
            self._answer(self._requests.Get_rank(), self._awaited[2], None)
            self._awaited = None

    def local(self, kind: int, args: tuple) -> Any:
        """An operation of this rank on its own window, applied at once in the calling thread (no request
        through the inbox; as atomic, under the same mutex). Raises what the operation raises."""
        with self._mutex:
            try:
                return self._apply(kind, args)
            except RmaError as exc:
                raise ValueError(str(exc)) from None

    def _handle(self, origin: int, kind: int, args: tuple, epoch: int) -> None:
        if origin in self._held:
            self._held[origin].append((kind, args, epoch))  # (its lock is not granted yet)
        elif kind == LOCK:
            lock_type, reply = args
            self._waiting.append((origin, lock_type, reply))
            self._held[origin] = []
            self._grant()
        elif kind in (UNLOCK, FLUSH):
            (reply,) = args
            if kind == UNLOCK:
                self._holders.pop(origin, None)
            if reply != NO_ANSWER:  # (an UNLOCK whose origin had every operation answered: no answer)
                self._answer(origin, reply, self._errors.pop(origin, None))
            if kind == UNLOCK:
                self._grant()
        else:
            reply = args[-1] if kind in (GET, GET_ACC, CAS) else None
            try:
                result = self._apply(kind, args)
            except (RmaError, ValueError, TypeError) as exc:
                result = RmaError(str(exc))
                if reply is None:
                    self._errors.setdefault(origin, str(exc))
            if reply is not None:
                self._answer(origin, reply, result)
            else:
                self._count(epoch)

    def _answer(self, origin: int, reply: int, value: Any) -> None:
        """Sent, not waited for: this may be the progress thread, which a wait for a large answer's
        acknowledgement would deadlock (the send completes on its own)."""
        world, tag = self._replies._send_envelope(origin, reply)
        try:
            self._engine.isend(world, self._replies._ctx, tag, serialize.dumps(value))
        except TransportError:
            pass  # (the origin is gone: nobody waits for the answer)

    def _grant(self) -> None:
        """Grant waiting locks from the front of the queue while they are compatible with the holders."""
        while self._waiting:
            origin, lock_type, reply = self._waiting[0]
            held = set(self._holders.values())
            if lock_type == LOCK_EXCLUSIVE and held or LOCK_EXCLUSIVE in held:
                return
            self._waiting.popleft()
            self._holders[origin] = lock_type
            if reply != NO_ANSWER:
                self._answer(origin, reply, None)
            for kind, args, epoch in self._held.pop(origin):  # (an UNLOCK among them grants the next ones in turn)
                self._handle(origin, kind, args, epoch)

    # ------------------------------------------------------------ operations
    def _apply(self, kind: int, args: tuple) -> Any:
        if kind == PUT:
            disp, count, datatype, data = args
            self._put(disp, count, datatype, data)
            return None
        if kind == GET:
            disp, count, datatype, _ = args
            return self._get(disp, count, datatype)
        if kind in (ACC, GET_ACC):
            disp, count, datatype, op_name, data = args[:5]
            old = self._get(disp, count, datatype) if kind == GET_ACC else None
            if op_name != "NO_OP":
                self._accumulate(disp, count, datatype, getattr(ops, op_name), data)
            return old
        disp, datatype, compare, data, _ = args  # CAS
        old = self._get(disp, 1, datatype)
        if old == bytes(compare):
            self._put(disp, 1, datatype, data)
        return old

    def _spec(self, disp: int, count: int, datatype: Datatype) -> list:
        memory, offset = self._locate(disp)
        return [memory[offset:], count, datatype]

    def _put(self, disp: int, count: int, datatype: Datatype, data: Any) -> None:
        msg = message(self._spec(disp, count, datatype), True)
        data = memoryview(data).cast("B")
        if len(data) > len(msg.view):
            raise RmaError(f"{len(data)} bytes do not fit {count} x {datatype.name or 'datatype'} at the target")
        msg.view[: len(data)] = data
        if msg.unpack is not None:
            msg.unpack(len(data))

    def _get(self, disp: int, count: int, datatype: Datatype) -> bytes:
        return bytes(message(self._spec(disp, count, datatype), False).view)

    def _accumulate(self, disp: int, count: int, datatype: Datatype, op: ops.Op, data: Any) -> None:
        target = simple(self._spec(disp, count, datatype), True)
        current = target.array()
        op.check(current.dtype, datatype.name)
        incoming = np.frombuffer(memoryview(data).cast("B"), dtype=current.dtype)
        if incoming.size != current.size:
            raise RmaError(f"accumulate of {incoming.size} elements into {current.size} at the target")
        op.combine(current, incoming, current, datatype)  # target = target op origin (REPLACE: origin)
        target.finish()
