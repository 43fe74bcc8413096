"""The only thing collective algorithms see: point-to-point within one collective call.

A ``Channel`` numbers ranks 0..size-1 as the communicator does, sends in the
communicator's collective context, and stamps every message with the call's
own tag, so concurrent (non-blocking) collectives on one communicator never
match each other's messages. Algorithms never import ``socket``.
"""

from __future__ import annotations

from typing import Sequence

from ..transport.engine import Engine
from ..transport.requests import Op, RecvOp


class Channel:
    __slots__ = ("rank", "size", "tag", "_engine", "_group", "_context")

    def __init__(self, engine: Engine, group: Sequence[int], rank: int, context: int, tag: int) -> None:
        self._engine = engine
        self._group = group
        self._context = context
        self.rank = rank
        self.size = len(group)
        self.tag = tag

    def isend(self, dest: int, *parts: memoryview) -> Op:
        return self._engine.isend(self._group[dest], self._context, self.tag, list(parts))

    def irecv(self, source: int, buf: memoryview | None = None) -> RecvOp:
        """Receive from `source` into `buf`, or into a new bytearray (``op.payload``) when None."""
        return self._engine.irecv(self._group[source], self._context, self.tag, buf)

    def send(self, dest: int, *parts: memoryview) -> None:
        self._engine.wait(self.isend(dest, *parts))

    def recv(self, source: int, buf: memoryview | None = None) -> RecvOp:
        op = self.irecv(source, buf)
        self._engine.wait(op)
        return op

    def wait(self, op: Op) -> None:
        self._engine.wait(op)

    def waitall(self, ops: Sequence[Op]) -> None:
        self._engine.wait_all(ops)
