"""``MPI.Op``: reduction operations on numpy arrays (vectorised ufuncs) and on Python objects."""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np


class Op:
    __slots__ = ("name", "_array_fn", "_object_fn", "commute", "_user")

    def __init__(
        self,
        name: str,
        array_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None,
        object_fn: Callable[[Any, Any], Any],
        commute: bool = True,
        user: Callable | None = None,
    ) -> None:
        self.name = name
        self._array_fn = array_fn
        self._object_fn = object_fn
        self.commute = commute
        self._user = user

    @classmethod
    def Create(cls, function: Callable, commute: bool = False) -> "Op":
        """A user operation; `function(invec, inoutvec, datatype)` updates inoutvec in place."""

        def on_objects(a: Any, b: Any) -> Any:
            return function(a, b, None)

        return cls(getattr(function, "__name__", "user"), None, on_objects, commute, function)

    def Is_commutative(self) -> bool:
        return self.commute

    @property
    def is_commutative(self) -> bool:
        return self.commute

    @property
    def is_predefined(self) -> bool:
        return self._user is None

    def Free(self) -> None:
        pass

    def __call__(self, x: Any, y: Any) -> Any:
        """x op y (x from the lower rank), for Python objects — as mpi4py's Op.__call__."""
        return self._object_fn(x, y)

    def apply_arrays(self, lower: np.ndarray, higher: np.ndarray, datatype: Any = None) -> np.ndarray:
        """lower op higher, elementwise, written into `higher` (returned)."""
        if self._user is not None:
            self._user(lower, higher, datatype)
            return higher
        return self._array_fn(lower, higher, out=higher)

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Op {self.name}>"


def _loc(better: Callable[[Any, Any], bool]):
    """MAXLOC/MINLOC on (value, index) pairs; ties keep the lower index."""

    def on_objects(a: Any, b: Any) -> Any:
        (va, ia), (vb, ib) = a, b
        if better(va, vb) or (va == vb and ia <= ib):
            return (va, ia)
        return (vb, ib)

    def on_arrays(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        take_a = better(a["v"], b["v"]) | ((a["v"] == b["v"]) & (a["i"] < b["i"]))
        out[take_a] = a[take_a]
        return out

    return on_arrays, on_objects


def _replace(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    out[...] = b
    return out


def _keep(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    out[...] = a
    return out


def _logical(fn):
    def on_arrays(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        out[...] = fn(a, b)
        return out

    return on_arrays


OP_NULL = Op("OP_NULL", None, lambda a, b: b)
SUM = Op("SUM", np.add, operator.add)
PROD = Op("PROD", np.multiply, operator.mul)
MAX = Op("MAX", np.maximum, lambda a, b: b if b > a else a)
MIN = Op("MIN", np.minimum, lambda a, b: b if b < a else a)
LAND = Op("LAND", _logical(np.logical_and), lambda a, b: bool(a and b))
LOR = Op("LOR", _logical(np.logical_or), lambda a, b: bool(a or b))
LXOR = Op("LXOR", _logical(np.logical_xor), lambda a, b: bool(a) != bool(b))
BAND = Op("BAND", np.bitwise_and, operator.and_)
BOR = Op("BOR", np.bitwise_or, operator.or_)
BXOR = Op("BXOR", np.bitwise_xor, operator.xor)
MAXLOC = Op("MAXLOC", *_loc(operator.gt))
MINLOC = Op("MINLOC", *_loc(operator.lt))
REPLACE = Op("REPLACE", _replace, lambda a, b: b, commute=False)
NO_OP = Op("NO_OP", _keep, lambda a, b: a, commute=False)
