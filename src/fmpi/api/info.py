"""``MPI.Info``: MPI's string-to-string hint dictionaries, with mpi4py's dict-like methods.

fmpi takes no hints, so an Info is only a container that calls accept (and
ignore, as MPI allows for hints an implementation does not know). Handles
behave as mpi4py's: ``Free()`` turns an Info into the null handle, so it then
compares equal to ``INFO_NULL``; two live Infos are equal only if they are the
same handle; ``INFO_NULL`` and ``INFO_ENV`` unpickle to themselves.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from . import exceptions as err
from .handles import Handled

MAX_INFO_KEY = 255
MAX_INFO_VAL = 1024

_handles = itertools.count(1)
_MISSING = object()


class Info(Handled):
    """Info object: a set of (key, value) string hints, usable as a dict."""
    # `_same`: the Info this one is another handle on, None for an original (what their integer handle,
    # handles.py, names: `_handle` numbers Infos for equality only, and leads back to none).
    __slots__ = ("_handle", "_items", "_predefined", "_same", "__weakref__")

    def __init__(self, info: Info | None = None) -> None:
        """``Info()`` is a null handle; ``Info(other)`` names the same handle as `other` (as mpi4py)."""
        if info is not None and not isinstance(info, Info):
            raise TypeError(f"expecting an MPI.Info, not {type(info).__name__}")
        self._same = (info._same or info) if info else None
        self._handle = 0 if info is None else info._handle
        self._items: dict[str, str] = {} if info is None else info._items
        self._predefined: str | None = None

    # ----------------------------------------------------------- MPI calls
    @classmethod
    def Create(cls, items: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> Info:
        """
        Create an Info, holding `items` (a mapping or (key, value) pairs) if given."""
        info = cls()
        info._handle = next(_handles)
        if items is not None:
            if not isinstance(items, (Mapping, Iterable)) or isinstance(items, (str, bytes)):
                raise TypeError(f"Info items must be a mapping or (key, value) pairs, not {type(items).__name__}")
            info.update(items)
        return info

    @classmethod
    def Create_env(cls, args: Iterable[str] | str | None = None) -> Info:
        """
        Create an Info with the keys MPI_INFO_ENV defines for this process (or for the command line `args`)."""
        return cls.Create(_environment(args))

    def Dup(self) -> Info:
        """
        Return a new Info with the same items."""
        self._live()
        return type(self).Create(self._items)

    def Free(self) -> None:
        """
        Free the Info: the handle becomes INFO_NULL (freeing a predefined one is ERR_ARG)."""
        self._live()
        if self._predefined is not None:
            raise err.Exception(err.ERR_ARG, f"cannot free the predefined {self._predefined}")
        self._handle, self._items = 0, {}

    def free(self) -> None:
        """
        Free unless null or predefined (mpi4py's lowercase form)."""
        if self and self._predefined is None:
            self.Free()

    def Get(self, key: str) -> str | None:
        """
        Return the value of `key`, or None if it is not set."""
        self._live()
        return self._items.get(_key(key))

    def Set(self, key: str, value: str) -> None:
        """
        Set `key` to `value` (a string of at most MAX_INFO_VAL characters)."""
        self._live()
        if self._predefined is not None:
            raise err.Exception(err.ERR_ARG, f"{self._predefined} is read-only")
        value = str(value)
        if len(value) > MAX_INFO_VAL:
            raise err.Exception(err.ERR_INFO_VALUE, f"info value longer than MAX_INFO_VAL ({MAX_INFO_VAL})")
        self._items[_key(key)] = value

    def Delete(self, key: str) -> None:
        """
        Delete `key` (ERR_INFO_NOKEY if it is not set)."""
        self._live()
        if self._items.pop(_key(key), None) is None:
            raise err.Exception(err.ERR_INFO_NOKEY, f"info key {key!r} is not set")

    def Get_nkeys(self) -> int:
        """
        Return the number of keys set."""
        self._live()
        return len(self._items)

    def Get_nthkey(self, n: int) -> str:
        """
        Return the `n`-th key, counting from 0."""
        self._live()
        keys = list(self._items)
        if not 0 <= n < len(keys):
            raise err.Exception(err.ERR_ARG, f"info has {len(keys)} keys, no key number {n}")
        return keys[n]

    # ---------------------------------------------- Python mapping methods
    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __getitem__(self, key: str) -> str:
        value = self._items.get(key) if self else None
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        if not self:
            raise KeyError(key)
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        if not self or key not in self._items:
            raise KeyError(key)
        self.Delete(key)

    def get(self, key: str, default: Any = None) -> Any:
        """
        Return the value of `key`, or `default` if it is not set."""
        return self._items.get(key, default)

    def keys(self) -> list[str]:
        """
        Return the list of keys."""
        return list(self._items)

    def values(self) -> list[str]:
        """
        Return the list of values."""
        return list(self._items.values())

    def items(self) -> list[tuple[str, str]]:
        """
        Return the list of (key, value) pairs."""
        return list(self._items.items())

    def update(self, other: Mapping[str, str] | Iterable[tuple[str, str]] = (), **kwds: str) -> None:
        """
        Set the items of `other` and of the keyword arguments."""
        if not self:
            raise KeyError("update")
        pairs = other.items() if isinstance(other, Mapping) else other
        for key, value in itertools.chain(pairs, kwds.items()):
            self.Set(key, value)

    def pop(self, key: str, *default: Any) -> Any:
        """
        Remove `key` and return its value, or `default` if given and the key is not set."""
        if self and key in self._items:
            value = self._items[key]
            self.Delete(key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, str]:
        """
        Remove a (key, value) pair and return it (KeyError if the Info is empty)."""
        if not self._items:
            raise KeyError("popitem(): info is empty")
        key = next(reversed(self._items))
        return key, self.pop(key)

    def copy(self) -> Info:
        """
        Return a new Info with the same items (a null Info for a null one)."""
        return self.Dup() if self else Info()

    def clear(self) -> None:
        """
        Delete every key."""
        if self:
            self._items.clear()

    # ------------------------------------------------------------ handles
    def __bool__(self) -> bool:
        return self._handle != 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Info) and other._handle == self._handle

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def _referent(self) -> Info:
        return self._same or self

    def __reduce__(self) -> str | tuple:
        if self._predefined is not None:
            return self._predefined  # the module global of that name: unpickles to the same object
        for predefined in (INFO_NULL, INFO_ENV):  # another handle on one: another, of this handle's class
            if self == predefined:
                return (type(self), (predefined,))
        return (type(self).Create, (self.items(),))

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Info {self._predefined or self._handle} {self.items()}>"

    def _live(self) -> None:
        if not self:
            raise err.Exception(err.ERR_ARG, "invalid info handle (INFO_NULL or freed)")


def _key(key: str) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_INFO_KEY:
        raise err.Exception(err.ERR_INFO_KEY, f"info key must be a string of 1..{MAX_INFO_KEY} characters, not {key!r}")
    return key


def _environment(args: Iterable[str] | str | None) -> dict[str, str]:
    """The keys MPI_INFO_ENV defines, for this process (`args`: the command line to describe instead)."""
    argv = list(sys.argv) if args is None else [args] if isinstance(args, str) else list(args)
    env = {"command": argv[0] if argv else sys.executable, "argv": " ".join(argv[1:]),
           "host": socket.gethostname(), "wdir": os.getcwd(), "thread_level": "MPI_THREAD_MULTIPLE"}
    return {k: v for k, v in env.items() if v}


def _predefined(name: str, info: Info) -> Info:
    info._predefined = name
    return info


INFO_NULL = _predefined("INFO_NULL", Info())
INFO_ENV = _predefined("INFO_ENV", Info.Create(_environment(None)))
