"""The origin side of one-sided communication: ``Win.Put``/``Get``/``Accumulate``/... (mixed into ``Win``).

Each call becomes one request to the target (``rma_target``). A put or an accumulate is
sent and the call returns (the origin buffer is free then, as MPI allows at the latest at the next
synchronization); a get, a get-accumulate or a compare-and-swap waits for the target's answer, so its result
is in place when the call returns, earlier than MPI requires and never later. The request-based forms
(``Rput``, ...) therefore return requests that are already complete.

They need ``Win``'s helpers: ``_send_request``, ``_ask``, ``_check_range`` and its ``_touched`` set.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import exceptions as err
from . import op as ops
from .buffers import message
from .constants import PROC_NULL
from .datatypes import Datatype
from .request import Request
from .rma_target import ACC, CAS, GET, GET_ACC, PUT


def _target_spec(target: Any, count: int, datatype: Datatype) -> tuple[int, int, Datatype]:
    """mpi4py's target forms: None (displacement 0, the origin's count and datatype), a displacement,
    or a sequence [disp], [disp, count], [disp, datatype], [disp, count, datatype]."""
    if target is None:
        return 0, count, datatype
    if not isinstance(target, (list, tuple)):
        try:
            return operator.index(target), count, datatype
        except TypeError:
            raise ValueError("target: expecting integral or list/tuple") from None
    items = list(target)
    if len(items) > 3:
        raise ValueError("target: expecting 3 items at most")
    if not items:
        return 0, count, datatype
    disp = operator.index(items[0])
    if len(items) == 2 and isinstance(items[1], Datatype):
        return disp, count, items[1]
    tcount = operator.index(items[1]) if len(items) > 1 else count
    return disp, tcount, items[2] if len(items) > 2 else datatype


#: Up to this many bytes a request carries its data as bytes: copying them costs less than pickling an array
#: (numpy's reduce and rebuild: ~30 µs a request, most of a small Put's cost; benchmarks/rma/rma_latency.py).
SMALL_DATA = 16 * 1024


def _bytes(view: memoryview) -> bytes | np.ndarray:
    """The bytes of a message: a copy when small, else an array pickled out of band (not copied into the pickle)."""
    if view.nbytes <= SMALL_DATA:
        return view.tobytes()
    return np.frombuffer(view, dtype=np.uint8)


def _predefined(op: Any) -> ops.Op:
    if not isinstance(op, ops.Op) or not op.is_predefined or op is ops.OP_NULL:
        raise err.Exception(err.ERR_OP, "one-sided accumulate operations take a predefined MPI.Op only")
    return op


class RmaCalls:
    # ------------------------------------------------------------- put / get
    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        if target_rank == PROC_NULL:
            return
        msg = message(origin, False)
        disp, count, datatype = _target_spec(target, msg.count, msg.datatype)
        self._check_range(target_rank, disp, count, datatype)
        _fits(len(msg.view), count, datatype)
        self._send_request(target_rank, PUT, (disp, count, datatype, _bytes(msg.view)))

    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        if target_rank == PROC_NULL:
            return
        msg = message(origin, True)
        disp, count, datatype = _target_spec(target, msg.count, msg.datatype)
        self._check_range(target_rank, disp, count, datatype)
        _receive_into(msg, self._ask(target_rank, GET, (disp, count, datatype)))

    # ----------------------------------------------------------- accumulates
    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: ops.Op = ops.SUM) -> None:
        op = _predefined(op)
        if target_rank == PROC_NULL:
            return
        msg = message(origin, False)
        disp, count, datatype = _target_spec(target, msg.count, msg.datatype)
        self._check_range(target_rank, disp, count, datatype)
        _fits(len(msg.view), count, datatype)
        op.check(msg.datatype.dtype, msg.datatype.name)
        op.check(datatype.dtype, datatype.name)  # (the target's too: its refusal would reach nobody)
        self._send_request(target_rank, ACC, (disp, count, datatype, op.name, _bytes(msg.view)))

    def Get_accumulate(
        self, origin: Any, result: Any, target_rank: int, target: Any = None, op: ops.Op = ops.SUM
    ) -> None:
        op = _predefined(op)
        if target_rank == PROC_NULL:
            return
        out = message(result, True)
        if op is ops.NO_OP and origin is None:
            data, count, datatype = _bytes(memoryview(b"")), out.count, out.datatype
        else:
            msg = message(origin, False)
            data, count, datatype = _bytes(msg.view), msg.count, msg.datatype
            op.check(msg.datatype.dtype, msg.datatype.name)
        disp, count, datatype = _target_spec(target, count, datatype)
        self._check_range(target_rank, disp, count, datatype)
        _receive_into(out, self._ask(target_rank, GET_ACC, (disp, count, datatype, op.name, data)))

    def Fetch_and_op(self, origin: Any, result: Any, target_rank: int, target_disp: int = 0, op: ops.Op = ops.SUM) -> None:
        out = _single(message(result, True), "result")
        if origin is not None or op is not ops.NO_OP:
            _same_type(_single(message(origin, False), "origin"), out, "result")
        self.Get_accumulate(origin, result, target_rank, [target_disp, 1, out.datatype], op)

    def Compare_and_swap(self, origin: Any, compare: Any, result: Any, target_rank: int, target_disp: int = 0) -> None:
        if target_rank == PROC_NULL:
            return
        new, old = _single(message(origin, False), "origin"), _single(message(compare, False), "compare")
        out = _single(message(result, True), "result")
        _same_type(new, old, "compare")
        _same_type(new, out, "result")
        datatype = new.datatype
        self._check_range(target_rank, target_disp, 1, datatype)
        size = datatype.Get_size()
        args = (target_disp, datatype, bytes(old.view[:size]), _bytes(new.view[:size]))
        _receive_into(out, self._ask(target_rank, CAS, args))

    # --------------------------------------------- request-based (complete)
    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        self.Put(origin, target_rank, target)
        return Request.completed()

    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        self.Get(origin, target_rank, target)
        return Request.completed()

    def Raccumulate(self, origin: Any, target_rank: int, target: Any = None, op: ops.Op = ops.SUM) -> Request:
        self.Accumulate(origin, target_rank, target, op)
        return Request.completed()

    def Rget_accumulate(
        self, origin: Any, result: Any, target_rank: int, target: Any = None, op: ops.Op = ops.SUM
    ) -> Request:
        self.Get_accumulate(origin, result, target_rank, target, op)
        return Request.completed()


def _single(msg: Any, what: str) -> Any:
    """mpi4py's check on the buffers of Fetch_and_op and Compare_and_swap: one element each."""
    if msg.count != 1:
        raise ValueError(f"{what}: expecting a single element, got {msg.count}")
    return msg


def _fits(nbytes: int, count: int, datatype: Datatype) -> None:
    """Refuse at the origin the data that would not fit its target's count and datatype: the target would
    only find out after this rank's fence had moved on (fences do not ask the targets: win_fence)."""
    room = count * datatype.Get_size()
    if nbytes > room:
        raise err.Exception(err.ERR_RMA_RANGE, f"{nbytes} bytes do not fit {count} x {datatype.name or 'datatype'} "
                            f"({room} bytes) at the target")


def _same_type(origin: Any, other: Any, what: str) -> None:
    if origin.datatype != other.datatype:
        raise ValueError(f"mismatch in origin and {what} MPI datatypes")


def _receive_into(msg: Any, data: bytes) -> None:
    """The bytes a target sent back, into the origin's (or result) buffer."""
    if len(data) > len(msg.view):
        raise err.Exception(err.ERR_TRUNCATE, f"{len(data)} bytes from the target do not fit a {len(msg.view)}-byte buffer")
    msg.view[: len(data)] = data
    if msg.unpack is not None:
        msg.unpack(len(data))
