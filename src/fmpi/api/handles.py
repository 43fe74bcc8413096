"""Integer handles of MPI objects: mpi4py's ``handle``/``fromhandle``, ``toint``/``fromint``, ``py2f``/``f2py``.

An MPI library hands out integers (or pointers) that C and Fortran code pass
around; mpi4py exposes them, and programs that hand a communicator or a
request to another library use them. fmpi's objects are Python objects, so
a handle is a number this process gives an object the first time it is
asked for one: the same object always gets the same number, 0 is the null
object, and the number leads back to the object while it lives (a weak
reference: a handle does not keep an object alive, as a freed MPI handle
dangles).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

NULL = 0

_lock = threading.Lock()
_numbers = itertools.count(1)
_by_number: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_by_object: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def number(obj: Any) -> int:
    """The handle of `obj` (given on first use)."""
    with _lock:
        found = _by_object.get(obj)
        if found is None:
            found = next(_numbers)
            _by_object[obj] = found
            _by_number[found] = obj
        return found


def lookup(handle: int, kind: str) -> Any:
    """The object `handle` names; ValueError for a number that names nothing (alive)."""
    if not isinstance(handle, int) or isinstance(handle, bool):
        raise TypeError(f"a handle is an integer, not {type(handle).__name__}")
    with _lock:
        obj = _by_number.get(handle)
    if obj is None:
        raise ValueError(f"{handle} is not the handle of a live {kind}")
    return obj
