"""``MPI.Op``: reduction operations on numpy arrays (vectorised ufuncs) and on Python objects.

On buffers an operation computes ``out = lower op higher`` elementwise with a
numpy ufunc writing straight into ``out`` (which may be either operand), so
reductions never leave C loops and never allocate. On Python objects it
behaves exactly as mpi4py's ``Op.__call__`` (``MPI.MAX(x, y)`` is ``y if y >
x else x``, and so on).

User operations follow mpi4py: ``Op.Create(fn, commute)`` where
``fn(inbuf, inoutbuf, datatype)`` updates ``inoutbuf`` in place, ``inbuf``
holding the lower ranks' contribution; on buffers ``fn`` receives ``MPI.buffer``
objects of bytes (``np.frombuffer(inbuf, dtype=...)`` gives the elements), and
an exception in it aborts the job; on Python objects it is called as
``fn(x, y, None)`` and returns the result.
"""

from __future__ import annotations

import sys
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import exceptions as err
from .handles import Handled
from .memory import buffer

# mpi4py registers a user operation's function in one of 32 C callback slots and raises RuntimeError
# when none is free; programs (and mpi4py's test suite) meet that limit, so fmpi keeps it. A slot is
# taken from Create to Free; one whose operation was dropped unfreed is given back (mpi4py leaks it),
# so fmpi never refuses an operation mpi4py would create.
MAX_USER_OPS = 32
_user_slots: weakref.WeakValueDictionary[int, Op] = weakref.WeakValueDictionary()

# (lower, higher, out). A predefined op's is its numpy ufunc itself: a binary ufunc's third
# positional argument is `out`, so it is called with no Python wrapper in between.
ArrayFn = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]


class Op(Handled):
    """Reduction operation: predefined (SUM, MAX, ...) or made by Op.Create."""
    # `_same`: the operation this handle is another handle on (``Op(op)``), None for an original: handles
    # on one operation compare equal and share its integer handle (handles.py). `_anonymous`: a handle on a
    # user operation made from its integer handle, which in mpi4py carries no Python function (no pickling).
    __slots__ = ("_array_fn", "_checked", "_kinds", "_object_fn", "_user", "commute", "name", "_same", "_anonymous",
                 "__weakref__")

    def __init__(self, op: Op | None = None) -> None:
        """``Op()``: a null handle (== OP_NULL); ``Op(op)``: another handle on `op`, as in mpi4py."""
        if op is not None and not isinstance(op, Op):
            raise TypeError(f"expecting an MPI.Op, not {type(op).__name__}")
        source = op if op is not None else OP_NULL
        for slot in ("_array_fn", "_checked", "_kinds", "_object_fn", "_user", "commute", "name", "_anonymous"):
            setattr(self, slot, getattr(source, slot))
        self._same = (op._same or op) if op else None

    @classmethod
    def _make(
        cls,
        name: str,
        array_fn: ArrayFn | None,
        object_fn: Callable[[Any, Any], Any],
        commute: bool = True,
        user: Callable | None = None,
        kinds: str | None = None,
    ) -> Op:
        """A new operation (the predefined ones, ``Create``'s)."""
        op = cls.__new__(cls)
        op.name = name
        op._array_fn = array_fn
        op._object_fn = object_fn
        op.commute = commute
        op._user = user
        op._kinds = kinds  # numpy dtype kinds the op is defined for (None: any)
        op._checked: set[np.dtype] = set()
        op._same = None
        op._anonymous = False
        return op

    @classmethod
    def _from_referent(cls, referent: Op) -> Op:
        """
        Return the handle ``fromhandle`` and ``fromint`` give for a user operation.

        As mpi4py's, it can reduce buffers but neither be called on objects nor pickled (mpi4py finds the function
        by the Python object)."""
        made = cls(referent)
        if made._user is not None:
            made._anonymous, made._object_fn = True, _obj_anonymous
        return made

    @classmethod
    def Create(cls, function: Callable, commute: bool = False) -> Op:
        """
        Create a user operation: `function(inbuf, inoutbuf, datatype)` updates inoutbuf in place."""
        if not callable(function):
            raise TypeError("Op.Create needs a callable")

        if len(_user_slots) >= MAX_USER_OPS:
            raise RuntimeError("cannot create too many user-defined reduction operations")

        def on_objects(a: Any, b: Any) -> Any:
            return function(a, b, None)

        op = cls._make(getattr(function, "__name__", "user"), None, on_objects, bool(commute), function)
        _user_slots[id(op)] = op
        return op

    def Is_commutative(self) -> bool:
        """
        Tell whether the operation is commutative."""
        if not self:
            raise err.Exception(err.ERR_OP, "invalid operation: MPI.OP_NULL")
        return self.commute

    @property
    def is_commutative(self) -> bool:
        return self.commute

    @property
    def is_predefined(self) -> bool:
        return self._user is None

    def Free(self) -> None:
        """
        Free a user operation: the handle becomes OP_NULL (a predefined or null one is ERR_OP, as under MPICH)."""
        if not self or self._user is None:
            raise err.Exception(err.ERR_OP, f"cannot free MPI.{self.name}: " + ("null" if not self else "predefined"))
        _user_slots.pop(id(self._same if self._same is not None else self), None)  # any handle frees it, as mpi4py
        self.name, self._array_fn, self._object_fn, self._user = "OP_NULL", None, _obj_null, None

    def free(self) -> None:
        """
        Free unless null or predefined (mpi4py's lowercase form).

        Another handle on a predefined operation (``Op(MPI.SUM)``) becomes null itself, as mpi4py's."""
        if self and self._user is not None:
            self.Free()
        elif self and self._same is not None:
            self.__init__()

    def __bool__(self) -> bool:
        return self._object_fn is not _obj_null

    def __eq__(self, other: object) -> bool:
        """The same operation, or both null (OP_NULL, or a freed user operation), as mpi4py's handles."""
        if not isinstance(other, Op):
            return NotImplemented
        if other is self or (not self and not other):
            return True
        return bool(self) and bool(other) and (self._same or self) is (other._same or other)

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def _referent(self) -> Op:
        return self._same or self

    def __reduce__(self) -> str | tuple:
        """
        Pickle the predefined operations by name (another handle on one, as another handle, of its class).

        A user operation is pickled as its function (by reference) and commutativity, as in mpi4py."""
        if self._anonymous:
            raise ValueError("cannot pickle user-defined reduction operation")
        if self._user is not None:
            return (type(self).Create, (self._user, self.commute))
        original = self._same or self if self else OP_NULL
        return original.name if self is original else (type(self), (original,))

    def __call__(self, x: Any, y: Any) -> Any:
        """x op y (x from the lower rank), for Python objects — as mpi4py's Op.__call__."""
        return self._object_fn(x, y)

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Op {self.name}>"

    # ------------------------------------------------------------- buffers
    def check(self, dtype: np.dtype | None, type_name: str = "") -> None:
        """
        Raise MPI.Exception(ERR_OP) unless this op is defined for `dtype` (all ranks raise alike)."""
        if dtype in self._checked:
            return
        if not self:
            raise err.Exception(err.ERR_OP, "MPI.OP_NULL cannot reduce")
        if dtype is None:
            raise err.Exception(err.ERR_TYPE, f"cannot reduce {type_name or 'this datatype'}: it has no element type")
        ok = True
        if self._kinds == "loc":
            ok = dtype.names == ("v", "i")
        elif self._kinds is not None:
            ok = dtype.fields is None and dtype.kind in self._kinds
        if not ok:
            raise err.Exception(err.ERR_OP, f"MPI.{self.name} is not defined for {type_name or dtype}")
        self._checked.add(dtype)

    def combine(self, lower: np.ndarray, higher: np.ndarray, out: np.ndarray, datatype: Any = None) -> None:
        """
        Compute out = lower op higher, elementwise; `out` may be `lower`, `higher` or another array."""
        if self._user is None:
            self._array_fn(lower, higher, out)
            return
        if lower.size == 0:
            return
        if out is not higher:
            if np.may_share_memory(out, lower):
                tmp = higher.copy()
                self._call_user(_byteview(lower), _byteview(tmp), datatype)
                np.copyto(out, tmp)
                return
            np.copyto(out, higher)
        self._call_user(_byteview(lower), _byteview(out), datatype)

    def _call_user(self, inbuf: buffer, inoutbuf: buffer, datatype: Any) -> None:
        """
        Call the user's function on buffers.

        An exception in it ends the job, as mpi4py's (which aborts with status 1): the other ranks of the collective
        would wait for this one's part for ever."""
        try:
            self._user(inbuf, inoutbuf, datatype)
        except BaseException:
            from . import runtime

            traceback.print_exc()
            print("Fatal Python error: exception in user-defined reduction operation", file=sys.stderr)
            runtime.abort(1, "exception in user-defined reduction operation")

    def reducer(self, datatype: Any = None) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
        """
        Return `combine` bound to a datatype: what the collective algorithms call."""
        if self._user is None:
            return self._array_fn
        return lambda lower, higher, out: self.combine(lower, higher, out, datatype)

    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        """
        Compute inoutbuf = inbuf op inoutbuf, on this process only."""
        from .collspecs import simple

        src, dst = simple(inbuf, False), simple(inoutbuf, True)
        if src.count != dst.count:
            raise ValueError(f"mismatch in inbuf count {src.count} and inoutbuf count {dst.count}")
        if src.datatype != dst.datatype:
            raise ValueError("mismatch in inbuf and inoutbuf MPI datatypes")
        self.check(dst.datatype.dtype, dst.datatype.name)
        out = dst.array()
        self.combine(src.array(), out, out, dst.datatype)
        dst.finish()


def _byteview(arr: np.ndarray) -> buffer:
    """What mpi4py hands a user function: an ``MPI.buffer`` over the elements' bytes (its slices take any
    object of as many bytes, e.g. ``b[:] = array("i", ...)``, which a memoryview of bytes refuses)."""
    return buffer._of(memoryview(arr.reshape(-1).view(np.uint8)), None, True)


# ------------------------------------------------------------------ objects
# Exactly mpi4py's definitions (Op.__call__ on Python objects).
def _obj_max(x: Any, y: Any) -> Any:
    return max(x, y)


def _obj_min(x: Any, y: Any) -> Any:
    return min(x, y)


def _obj_maxloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u > v:
        return u, i
    if v > u:
        return v, j
    return (v, j) if j < i else (u, i)


def _obj_minloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u < v:
        return u, i
    if v < u:
        return v, j
    return (v, j) if j < i else (u, i)


def _obj_null(x: Any, y: Any) -> Any:
    raise ValueError("cannot call MPI.OP_NULL")


def _obj_anonymous(x: Any, y: Any) -> Any:
    raise ValueError("cannot call user-defined operation")


# ------------------------------------------------------------------- arrays
def _loc(better: np.ufunc) -> ArrayFn:
    """MAXLOC/MINLOC on (value, index) pairs; equal values keep the smaller index."""

    def run(lower: np.ndarray, higher: np.ndarray, out: np.ndarray) -> None:
        a, b = lower["v"], higher["v"]
        take_lower = better(a, b) | ((a == b) & (lower["i"] < higher["i"]))
        np.copyto(out, np.where(take_lower, lower, higher))

    return run


def _replace(lower: np.ndarray, higher: np.ndarray, out: np.ndarray) -> None:
    if out is not higher:
        np.copyto(out, higher)


def _keep(lower: np.ndarray, higher: np.ndarray, out: np.ndarray) -> None:
    if out is not lower:
        np.copyto(out, lower)


# Where MPI (MPICH) defines the predefined ops, by numpy kind: logical and bitwise ops
# only on integers (and C bool); MAX/MIN not on complex; MAXLOC/MINLOC on pair types.
_NUMBERS = "iufc"
_REAL = "iuf"
_INTEGERS = "biu"

OP_NULL = Op._make("OP_NULL", None, _obj_null)
SUM = Op._make("SUM", np.add, lambda x, y: x + y, kinds=_NUMBERS)
PROD = Op._make("PROD", np.multiply, lambda x, y: x * y, kinds=_NUMBERS)
MAX = Op._make("MAX", np.maximum, _obj_max, kinds=_REAL)
MIN = Op._make("MIN", np.minimum, _obj_min, kinds=_REAL)
LAND = Op._make("LAND", np.logical_and, lambda x, y: bool(x) & bool(y), kinds=_INTEGERS)
LOR = Op._make("LOR", np.logical_or, lambda x, y: bool(x) | bool(y), kinds=_INTEGERS)
LXOR = Op._make("LXOR", np.logical_xor, lambda x, y: bool(x) ^ bool(y), kinds=_INTEGERS)
BAND = Op._make("BAND", np.bitwise_and, lambda x, y: x & y, kinds=_INTEGERS)
BOR = Op._make("BOR", np.bitwise_or, lambda x, y: x | y, kinds=_INTEGERS)
BXOR = Op._make("BXOR", np.bitwise_xor, lambda x, y: x ^ y, kinds=_INTEGERS)
MAXLOC = Op._make("MAXLOC", _loc(np.greater), _obj_maxloc, kinds="loc")
MINLOC = Op._make("MINLOC", _loc(np.less), _obj_minloc, kinds="loc")
REPLACE = Op._make("REPLACE", _replace, lambda x, y: y, commute=False)
NO_OP = Op._make("NO_OP", _keep, lambda x, y: x, commute=False)


def as_object_fn(op: Any) -> Callable[[Any, Any], Any]:
    """The two-argument function the lowercase API folds with: an Op, or any callable (as mpi4py)."""
    if isinstance(op, Op):
        return op._object_fn
    if callable(op):
        return op
    raise TypeError(f"op must be an MPI.Op or a callable, not {type(op).__name__}")
