"""User attributes: ``Create_keyval``/``Free_keyval`` and ``Get_attr``/``Set_attr``/``Delete_attr``
on communicators, datatypes and windows, with mpi4py's callbacks.

``Create_keyval(copy_fn=None, delete_fn=None, nopython=False)``: on ``Dup`` an attribute is copied
when ``copy_fn`` is True (the same value), or a callable ``copy_fn(obj, keyval, value)`` returns
something other than ``NotImplemented``; ``delete_fn(obj, keyval, value)`` runs when the attribute
is replaced, deleted, or its object freed (in MPICH's order). A callback's exception is printed
and raised as ``MPI.Exception`` (its class for an MPI.Exception, ERR_OTHER for any other), as mpi4py
does. Keyvals are numbered as MPICH numbers them (one counter, a prefix per kind of object); a
keyval of another kind, KEYVAL_INVALID or a predefined keyval given to ``Set_attr``/``Delete_attr``
is ERR_KEYVAL. A communicator's attributes live in its (shared) instance dict, a datatype's beside
its type record.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

from . import constants as c
from . import exceptions as err

_PREFIX = {"comm": 0xA4400000, "type": 0xA4C00000, "win": 0xA6000000}
_PREDEFINED = {c.TAG_UB, c.APPNUM, c.UNIVERSE_SIZE, c.WTIME_IS_GLOBAL, c.IO, c.LASTUSEDCODE}
_keyvals: dict[int, tuple[str, Any, Any]] = {}  # keyval -> (kind, copy_fn, delete_fn)
_created = 0
_type_attrs: dict[int, tuple[Any, dict[int, Any]]] = {}  # id(type record) -> (record, its attributes)


def create(kind: str, copy_fn: Any = None, delete_fn: Any = None) -> int:
    global _created
    keyval = (_PREFIX[kind] | _created) - (1 << 32)  # a C int, as MPICH's
    _created += 1
    _keyvals[keyval] = (kind, copy_fn, delete_fn)
    return keyval


def _lookup(kind: str, keyval: int) -> tuple[str, Any, Any]:
    entry = _keyvals.get(keyval)
    if entry is None or entry[0] != kind:
        raise err.Exception(err.ERR_KEYVAL, f"invalid {kind} keyval {keyval}")
    return entry


def free(kind: str, keyval: int) -> int:
    """The keyval is no longer usable; the attributes set with it stay until deleted (their delete_fn then runs)."""
    _lookup(kind, keyval)
    _keyvals[keyval] = ("freed", *_keyvals[keyval][1:])
    return c.KEYVAL_INVALID


def _call(fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except err.Exception as exc:
        traceback.print_exc(file=sys.stderr)
        raise err.Exception(exc.Get_error_class()) from None
    except Exception:
        traceback.print_exc(file=sys.stderr)
        raise err.Exception(err.ERR_OTHER) from None


def get(kind: str, attrs: dict[int, Any], keyval: int) -> Any:
    _lookup(kind, keyval)
    return attrs.get(keyval)


def set_attr(kind: str, obj: Any, attrs: dict[int, Any], keyval: int, value: Any) -> None:
    _lookup(kind, keyval)
    if keyval in attrs:
        delete(kind, obj, attrs, keyval, check=False)
    attrs[keyval] = value


def delete(kind: str, obj: Any, attrs: dict[int, Any], keyval: int, check: bool = True) -> None:
    """Remove the attribute (if set) and run its delete_fn; it is gone even if delete_fn fails."""
    if check:
        _lookup(kind, keyval)
    if keyval not in attrs:
        return
    value = attrs.pop(keyval)
    delete_fn = _keyvals[keyval][2]
    if callable(delete_fn):
        _call(delete_fn, obj, keyval, value)


def copied(obj: Any, attrs: dict[int, Any]) -> dict[int, Any]:
    """The attributes a duplicate of `obj` gets."""
    out = {}
    for keyval, value in list(attrs.items()):
        copy_fn = _keyvals[keyval][1]
        if copy_fn is True:
            out[keyval] = value
        elif callable(copy_fn):
            new = _call(copy_fn, obj, keyval, value)
            if new is not NotImplemented:
                out[keyval] = new
    return out


def delete_all(kind: str, obj: Any, attrs: dict[int, Any]) -> None:
    """Run the delete_fn of every attribute when `obj` is freed, in MPICH's order: the last set first on a
    communicator, the first set first on a datatype or a window."""
    failed = None
    for keyval in reversed(list(attrs)) if kind == "comm" else list(attrs):
        try:
            delete(kind, obj, attrs, keyval, check=False)
        except err.Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


class CommAttributes:
    """Mixed into ``Comm``: the predefined attributes (``attributes.predefined_attribute``) and the user's."""

    def _attrs(self) -> dict[int, Any]:
        return self.__dict__.setdefault("_attributes", {})

    def Get_attr(self, keyval: int) -> Any:
        from .attributes import predefined_attribute

        self._live()  # type: ignore[attr-defined]
        if keyval in _PREDEFINED:
            return predefined_attribute(keyval)
        return get("comm", self._attrs(), keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        self._live()  # type: ignore[attr-defined]
        set_attr("comm", self, self._attrs(), keyval, attrval)

    def Delete_attr(self, keyval: int) -> None:
        self._live()  # type: ignore[attr-defined]
        delete("comm", self, self._attrs(), keyval)

    @classmethod
    def Create_keyval(cls, copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        return create("comm", copy_fn, delete_fn)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        return free("comm", keyval)

    def _copy_attributes(self, child: Any) -> Any:
        """`child` (a Dup of this communicator) with this one's attributes copied; returned."""
        child.__dict__["_attributes"] = copied(self, self._attrs())
        return child

    def _delete_attributes(self) -> None:
        if self.__dict__.get("_attributes"):
            delete_all("comm", self, self.__dict__["_attributes"])


class DatatypeAttributes:
    """Mixed into ``Datatype`` (through ``TypeConstructors``): attributes kept beside the type record."""

    __slots__ = ()

    def _attrs(self) -> dict[int, Any]:
        record = self._live()  # type: ignore[attr-defined]
        return _type_attrs.setdefault(id(record), (record, {}))[1]

    def Get_attr(self, keyval: int) -> Any:
        return get("type", self._attrs(), keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        set_attr("type", self, self._attrs(), keyval, attrval)

    def Delete_attr(self, keyval: int) -> None:
        delete("type", self, self._attrs(), keyval)

    @classmethod
    def Create_keyval(cls, copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        return create("type", copy_fn, delete_fn)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        return free("type", keyval)

    def _copy_attributes(self, new: Any) -> Any:
        entry = _type_attrs.get(id(self._t))  # type: ignore[attr-defined]
        if entry is not None and entry[1]:
            _type_attrs[id(new._t)] = (new._t, copied(self, entry[1]))
        return new

    def _delete_attributes(self) -> None:
        entry = _type_attrs.pop(id(self._t), None)  # type: ignore[attr-defined]
        if entry is not None and entry[1]:
            delete_all("type", self, entry[1])
