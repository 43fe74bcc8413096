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

# Reentrant: a weak reference's callback (_forget) can run, collecting garbage, inside number() itself.
_lock = threading.RLock()
_numbers = itertools.count(1)
_by_number: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
# By id, not by the object: MPI objects are unhashable, as mpi4py's. The weak reference tells a live
# object from a dead one whose id was reused, and its callback forgets the dead one.
_by_id: dict[int, tuple[weakref.ref, int]] = {}


def _forget(key: int, found: int) -> Any:
    def forget(_ref: weakref.ref) -> None:
        with _lock:
            entry = _by_id.get(key)
            if entry is not None and entry[1] == found:
                del _by_id[key]

    return forget


def number(obj: Any) -> int:
    """The handle of `obj` (given on first use)."""
    with _lock:
        entry = _by_id.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        found = next(_numbers)
        _by_id[id(obj)] = (weakref.ref(obj, _forget(id(obj), found)), found)
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


class Handled:
    """Mixed into the MPI classes (requests have their own, in request.py): ``handle``/``fromhandle``,
    ``toint``/``fromint``, ``py2f``/``f2py``. A class says what all its handles on one object share
    (``_referent``: weakly referenceable, alive while the object is) and how to make a handle on it."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Taking the constructor's arguments, as mpi4py's ``__new__`` does: subclasses that override
        ``__new__`` call ``super().__new__(cls, obj)`` (mpi4py's test_subclass); ``__init__`` uses them."""
        return super().__new__(cls)

    def _referent(self) -> Any:
        raise NotImplementedError

    @classmethod
    def _from_referent(cls, referent: Any) -> Any:
        return cls(referent)

    @property
    def handle(self) -> int:
        """This object's integer handle (0: the null object); every handle on one object shares it."""
        return number(self._referent()) if self else NULL

    @classmethod
    def fromhandle(cls, handle: int) -> Any:
        """A handle on the object `handle` names (``cls()``, a null one, for 0)."""
        if handle == NULL:
            return cls()
        return cls._from_referent(lookup(handle, cls.__name__))

    def toint(self) -> int:
        """The C integer handle: ``handle`` (fmpi has one kind of handle number)."""
        return self.handle

    def py2f(self) -> int:
        """The Fortran integer handle: ``handle`` too."""
        return self.handle

    fromint = f2py = fromhandle
