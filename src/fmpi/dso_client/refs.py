"""Handles on one shared object each (``client.mailbox(name)``, ``.counter(name)``, ``.map(name)``): its methods as calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .node_connection import Pending, SharedObjectError

if TYPE_CHECKING:
    from .client import DsoClient


def no_value(meta: dict, value: memoryview) -> None:
    """A call's answer that carries nothing."""
    return None


def found_value(meta: dict, value: memoryview) -> bytes | None:
    """A call's answer: the value's bytes, or None when the server found nothing."""
    return bytes(value) if meta.get("found", True) else None

class MailboxRef:
    """A FIFO of byte strings: ``put`` never blocks, ``take`` waits while it is empty."""

    def __init__(self, client: DsoClient, name: str) -> None:
        self.client, self.name = client, name

    def put(self, value: Any) -> None:
        self.client.call("mailbox", self.name, "put", payload=value)

    def put_async(self, value: Any) -> Pending:
        return self.client.call_async("mailbox", self.name, "put", payload=value, convert=no_value)

    def take(self, timeout: float | None = None) -> bytes:
        """The oldest item; waits up to `timeout` s (SharedObjectTimeout then; the item stays in the mailbox)."""
        return self.client.call("mailbox", self.name, "take", timeout=timeout, blocking=True, convert=found_value)

    def take_nowait(self) -> bytes | None:
        try:
            return self.client.call("mailbox", self.name, "take", {"nowait": True}, convert=found_value)
        except SharedObjectError as exc:
            if exc.code == "empty":
                return None
            raise

    def size(self) -> int:
        return int(self.client.call("mailbox", self.name, "size")[0]["n"])


class CounterRef:
    """An atomic int64."""

    def __init__(self, client: DsoClient, name: str) -> None:
        self.client, self.name = client, name

    def add(self, delta: int = 1) -> int:
        """Add `delta`; the new value."""
        return int(self.client.call("counter", self.name, "add", {"delta": int(delta)})[0]["value"])

    def get(self) -> int:
        return int(self.client.call("counter", self.name, "get")[0]["value"])


class MapRef:
    """A map of str keys to byte strings."""

    def __init__(self, client: DsoClient, name: str) -> None:
        self.client, self.name = client, name

    def put(self, key: str, value: Any) -> bool:
        """Store `value` under `key`; whether it replaced a value."""
        return bool(self.client.call("map", self.name, "put", {"key": key}, value)[0]["replaced"])

    def put_async(self, key: str, value: Any) -> Pending:
        return self.client.call_async("map", self.name, "put", {"key": key}, value, convert=no_value)

    def get(self, key: str) -> bytes | None:
        return self.client.call("map", self.name, "get", {"key": key}, convert=found_value)

    def get_async(self, key: str) -> Pending:
        return self.client.call_async("map", self.name, "get", {"key": key}, convert=found_value)

    def cas(self, key: str, expect: Any | None, new: Any | None) -> tuple[bool, bytes | None]:
        """If the value under `key` is `expect` (None: absent), make it `new` (None: delete). (swapped, value now)."""
        exp = b"" if expect is None else bytes(expect)
        args = {"key": key, "expect_len": None if expect is None else len(exp), "delete": new is None}
        payload = exp + (b"" if new is None else bytes(new))
        meta, value = self.client.call("map", self.name, "cas", args, payload)
        return bool(meta["swapped"]), bytes(value) if meta["found"] else None

    def delete(self, key: str) -> bool:
        return bool(self.client.call("map", self.name, "delete", {"key": key})[0]["found"])

    def keys(self, prefix: str = "", limit: int = 10_000) -> list[str]:
        return list(self.client.call("map", self.name, "keys", {"prefix": prefix, "limit": limit})[0]["keys"])

    def count(self, prefix: str = "") -> int:
        """How many keys start with `prefix`."""
        return int(self.client.call("map", self.name, "keys", {"prefix": prefix, "limit": 0})[0]["total"])

    def size(self) -> int:
        return int(self.client.call("map", self.name, "size")[0]["n"])


def value_bytes(meta: dict, value: memoryview) -> bytes:
    return bytes(value)


# How long a window's calls may wait: behind a lock another rank holds, as long as it holds it (a day: no bound
# in practice; a lost relay fails the calls at once).
LOCK_WAIT = 86400.0


class WindowRef:
    """One rank's segment of a relay-hosted MPI window (the relay's ``window`` object): its methods as calls.

    `runs` are ``[[start, length], ...]`` byte ranges after `offset`, in the order of the data; data
    methods return a ``Pending`` so that an origin may have many in flight (one connection keeps their
    order).
    """

    def __init__(self, client: DsoClient, name: str) -> None:
        self.client, self.name = client, name

    def create(self, size: int, initial: Any = b"") -> None:
        self.client.call("window", self.name, "create", {"size": size}, initial, convert=no_value)

    def put_async(self, offset: int, runs: list, data: Any) -> Pending:
        return self.client.call_async("window", self.name, "put", {"offset": offset, "runs": runs}, data, convert=no_value, timeout=LOCK_WAIT)

    def get_async(self, offset: int, runs: list) -> Pending:
        return self.client.call_async("window", self.name, "get", {"offset": offset, "runs": runs}, convert=value_bytes, timeout=LOCK_WAIT)

    def acc_async(self, offset: int, runs: list, dtype: str | None, op: str, data: Any, fetch: bool) -> Pending:
        args = {"offset": offset, "runs": runs, "op": op, "fetch": fetch, "dtype": dtype}
        return self.client.call_async("window", self.name, "acc", args, data, convert=value_bytes if fetch else no_value, timeout=LOCK_WAIT)

    def cas(self, offset: int, compare: bytes, new: bytes) -> bytes:
        args = {"offset": offset, "n": len(compare)}
        return self.client.call("window", self.name, "cas", args, compare + new, convert=value_bytes, timeout=LOCK_WAIT)

    def lock(self, exclusive: bool) -> None:
        """Wait until the lock is granted."""
        self.lock_async(exclusive).result()

    def lock_async(self, exclusive: bool) -> Pending:
        """Ask for the lock; the relay holds this client's later calls on the segment until it is granted, so they
        may follow at once. The wait has no practical bound (a lock is held as long as its holder wants)."""
        return self.client.call_async("window", self.name, "lock", {"type": "exclusive" if exclusive else "shared"},
                                      timeout=LOCK_WAIT, blocking=True, convert=no_value)

    def unlock(self) -> None:
        self.unlock_async().result()

    def unlock_async(self) -> Pending:
        return self.client.call_async("window", self.name, "unlock", convert=no_value, timeout=LOCK_WAIT)

    def drop(self) -> None:
        self.client.drop(self.name)
