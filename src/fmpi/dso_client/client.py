"""Client of the shared objects (DSO) hosted by fmpi-relay nodes.

    client = DsoClient("tcp://a:7000,b:7000", job, token, rank=r, size=n)
    client.barrier("world", generation)                 # one round trip
    total = client.allreduce("loss", step, r, array)    # one contribution, one result
    client.mailbox("jobs").put(b"...");  client.mailbox("jobs").take(timeout=5)
    client.counter("done").add(1);  client.map("conf").cas("leader", None, b"3")

Objects are sharded over the relay nodes by consistent hashing of their
names (``hash_ring.py``: a ring with virtual nodes, the same on every rank),
so each object lives on exactly one node and its methods stay linearizable;
adding a node moves only about 1/(nodes) of the names. One connection per
node (``dso_connection.py``), opened on first use; calls can be pipelined
(``*_async`` return a ``Pending``) and made from several threads.

Values are bytes (or any buffer); numpy arrays travel as raw bytes with
their dtype, never pickled. A call that waits on the server (take, barrier,
allreduce) sends its timeout along, so the server gives up at the same time
and a mailbox item is never handed to a caller that stopped waiting.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..rendezvous.relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    open_with,
)
from ..rendezvous.urls import parse_relay_url, relay_addresses, relay_scheme
from ..util.retry import retry_until
from ..wire.relay_protocol import Kind, encode
from .hash_ring import HashRing
from .node_connection import NodeConnection, Pending, SharedObjectError

GRACE = 2.0  # how much longer than the server's timeout a client waits for the server's answer
# What a restarting node answers until it is back and hosts the job again.
_NODE_COMING_BACK = frozenset({"unreachable", "unknown_job", "lost", "timeout"})


def parse_relay_urls(spec: str | Sequence[str]) -> list[tuple[str, int]]:
    """'tcp://a:7000,b:7000' (or 'tcp://a:7000,tcp://b:7000', or a list of such URLs) -> [(host, port), ...]."""
    items = [spec] if isinstance(spec, str) else list(spec)
    out = [address for item in items for address in relay_addresses(item.strip())]
    if not out:
        raise ValueError(f"no relay address in {spec!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"relay addresses repeat in {spec!r}")
    return out


def _scheme_of(spec: str | Sequence[str]) -> str:
    """'tls' when the relays are spoken to over TLS (tls://...), else 'tcp'."""
    first = spec if isinstance(spec, str) else (list(spec) or [""])[0]
    return relay_scheme(first)


class DsoClient:
    """Shared objects of one job, sharded over one or more relay nodes (see the module docstring).

    ``rank`` and ``size`` are defaults for barriers and reductions, so that
    a collective calls ``barrier(comm_name, generation)`` and
    ``allreduce(name, round, rank, array, op)``.
    """

    def __init__(
        self,
        relays: str | Sequence[str],
        job: str,
        token: str,
        *,
        rank: int | None = None,
        size: int | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        vnodes: int = 128,
    ) -> None:
        self.addresses = parse_relay_urls(relays)
        self.scheme = _scheme_of(relays)
        self.job, self._token = job, token
        self.rank, self.size = rank, size
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._by_key = {f"{h}:{p}": (h, p) for h, p in self.addresses}
        self.ring = HashRing(list(self._by_key), vnodes)
        self._nodes: dict[str, NodeConnection] = {}
        self._lock = threading.Lock()
        self._reconnecting = threading.Lock()
        self._gone: dict[str, SharedObjectError] = {}  # nodes that did not come back
        self.on_new_connection: Callable[[], None] | None = None  # called after a node connection is made

    # ------------------------------------------------------------- plumbing
    def node_of(self, name: str) -> str:
        """The relay (tcp://host:port) that holds object `name`."""
        return f"{self.scheme}://" + self.ring.node(name)

    def _node(self, name: str) -> NodeConnection:
        key = self.ring.node(name)
        node = self._nodes.get(key)
        if node is None:
            with self._lock:
                node = self._nodes.get(key)
                if node is None:
                    node = self._nodes[key] = NodeConnection(*self._by_key[key], self.job, self._token, self.connect_timeout, self.scheme)
            self._changed()
        return node

    def reconnect(self, key: str, within: float, lost: NodeConnection | None = None) -> bool:
        """Replace the lost connection to node `key` ("host:port"), or make the first one; whether this call did.

        `lost`: the connection found lost (default: the current one, if it
        died); if another thread replaced it already, nothing is done. A node
        that restarted knows nothing of the job until the launcher hosts it
        there again (``DsoHost``), and answers 'unknown_job' till then: this
        tries again until `within` seconds have passed, then gives up on the
        node for good. With no connection yet (a rank's first call on the
        node found it down: ``coming_back``), it waits for the node the same way.
        """
        url = f"{self.scheme}://{key}"
        with self._reconnecting:
            if key in self._gone:
                raise self._gone[key]
            current = self._nodes.get(key)
            if current is not None:
                if lost is None:
                    lost = current if current.dead is not None else None
                if lost is None or current is not lost:
                    return False
                lost.fail(SharedObjectError("lost the connection (did the node restart?)", "lost", url))
            try:
                node = retry_until(
                    lambda: NodeConnection(*self._by_key[key], self.job, self._token, self.connect_timeout, self.scheme),
                    time.monotonic() + within, 0.1, lambda exc: isinstance(exc, RelayError) and exc.code in _NODE_COMING_BACK,
                )
            except RelayError as exc:
                self._gone[key] = SharedObjectError(
                    f"lost relay node {url}, and it did not come back within {within:g} s ({exc})", "lost"
                )
                raise self._gone[key] from None
            with self._lock:
                if self._nodes.get(key) is not current:  # (a first connection made meanwhile by ``_node``)
                    node.close()
                    return False
                self._nodes[key] = node
            self._changed()
            return True

    def coming_back(self, exc: RelayError, name: str) -> bool:
        """`exc`, from a call on `name`, is a first connection to its node failing while the node restarts."""
        return (
            not isinstance(exc, SharedObjectError)
            and exc.code in _NODE_COMING_BACK
            and self.ring.node(name) not in self.connections()
        )

    def connections(self) -> dict[str, NodeConnection]:
        """Node ("host:port") -> its current connection, for the nodes connected so far."""
        with self._lock:
            return dict(self._nodes)

    def _changed(self) -> None:
        if self.on_new_connection is not None:
            self.on_new_connection()

    def connect_all(self) -> None:
        """Attach to every node now (fails fast, naming a relay that cannot be reached)."""
        for key in self._by_key:
            with self._lock:
                if key not in self._nodes:
                    self._nodes[key] = NodeConnection(*self._by_key[key], self.job, self._token, self.connect_timeout, self.scheme)

    def call_async(
        self,
        kind: str,
        name: str,
        method: str,
        args: dict[str, Any] | None = None,
        payload: Any = None,
        *,
        timeout: float | None = None,
        blocking: bool = False,
        convert: Callable[[dict, memoryview], Any] | None = None,
    ) -> Pending:
        """Send one call; ``.result()`` on what it returns waits for the reply.

        A blocking call (one that waits on the server) tells the server its
        timeout, and the client waits a little longer for the server's answer.
        """
        timeout = self.timeout if timeout is None else timeout
        meta: dict[str, Any] = {"type": kind, "name": name, "method": method}
        if args:
            meta["args"] = args
        if blocking:
            meta["timeout"] = timeout
            deadline = time.monotonic() + timeout + GRACE
        else:
            deadline = time.monotonic() + timeout
        return self._node(name).start(meta, payload, deadline, convert)

    def call(self, kind: str, name: str, method: str, args: dict[str, Any] | None = None, payload: Any = None, **kw: Any) -> Any:
        return self.call_async(kind, name, method, args, payload, **kw).result()

    def close(self) -> None:
        with self._lock:
            for node in self._nodes.values():
                node.close()
            self._nodes.clear()

    def __enter__(self) -> "DsoClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------- objects
    def mailbox(self, name: str) -> "MailboxRef":
        return MailboxRef(self, name)

    def counter(self, name: str) -> "CounterRef":
        return CounterRef(self, name)

    def map(self, name: str) -> "MapRef":
        return MapRef(self, name)

    def info(self, name: str) -> dict[str, Any]:
        """{'exists', 'type', 'bytes'} of object `name` (does not create it)."""
        meta, _ = self.call("any", name, "info")
        return {k: meta[k] for k in ("exists", "type", "bytes")}

    def drop(self, name: str) -> bool:
        """Delete object `name` (its waiters fail with code 'dropped'); whether it existed."""
        meta, _ = self.call("any", name, "drop")
        return bool(meta["found"])

    # ---------------------------------------------------------- collectives
    def barrier_async(
        self, name: str, generation: int, rank: int | None = None, *, size: int | None = None, timeout: float | None = None
    ) -> Pending:
        rank, size = self._who(rank, size)
        args = {"rank": rank, "generation": generation, "n": size}
        return self.call_async("barrier", name, "wait", args, timeout=timeout, blocking=True, convert=_none)

    def barrier(self, name: str, generation: int, rank: int | None = None, *, size: int | None = None, timeout: float | None = None) -> None:
        """Return when all `size` ranks called it for this `generation` (one round trip; a repeated call counts once)."""
        self.barrier_async(name, generation, rank, size=size, timeout=timeout).result()

    def allreduce_async(
        self,
        name: str,
        round: int,
        rank: int | None,
        array: Any,
        op: str = "sum",
        *,
        size: int | None = None,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Pending:
        rank, size = self._who(rank, size)
        arr = np.ascontiguousarray(array)
        shape, dtype = arr.shape, arr.dtype
        if out is not None and (out.dtype != dtype or out.size != arr.size):
            raise ValueError(f"out must hold {arr.size} elements of {dtype}, not {out.size} of {out.dtype}")

        def convert(meta: dict, value: memoryview) -> np.ndarray:
            result = np.frombuffer(value, dtype=dtype)
            if result.size != arr.size:
                raise SharedObjectError(f"reducer {name!r} returned {result.size} elements, not {arr.size}", "protocol")
            if out is not None:
                out.reshape(-1)[...] = result
                return out
            return result.reshape(shape)

        args = {"rank": rank, "round": round, "n": size, "dtype": dtype.str, "op": op}
        return self.call_async(
            "reducer", name, "contribute", args, arr.reshape(-1).view(np.uint8), timeout=timeout, blocking=True, convert=convert
        )

    def allreduce(
        self,
        name: str,
        round: int,
        rank: int | None,
        array: Any,
        op: str = "sum",
        *,
        size: int | None = None,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> np.ndarray:
        """Contribute `array` to round `round` of reducer `name`; the fold of all `size` contributions, in rank order.

        ops: sum, prod, max, min, band, bor, bxor, land, lor, lxor. A
        contribution repeated for the same (round, rank) is not counted again.
        """
        return self.allreduce_async(name, round, rank, array, op, size=size, out=out, timeout=timeout).result()

    def _who(self, rank: int | None, size: int | None) -> tuple[int, int]:
        rank = self.rank if rank is None else rank
        size = self.size if size is None else size
        if rank is None or size is None:
            raise ValueError("rank and size are needed (pass them, or give them to DsoClient)")
        return rank, size


def _none(meta: dict, value: memoryview) -> None:
    return None


def _value(meta: dict, value: memoryview) -> bytes | None:
    return bytes(value) if meta.get("found", True) else None


class MailboxRef:
    """A FIFO of byte strings: ``put`` never blocks, ``take`` waits while it is empty."""

    def __init__(self, client: DsoClient, name: str) -> None:
        self.client, self.name = client, name

    def put(self, value: Any) -> None:
        self.client.call("mailbox", self.name, "put", payload=value)

    def put_async(self, value: Any) -> Pending:
        return self.client.call_async("mailbox", self.name, "put", payload=value, convert=_none)

    def take(self, timeout: float | None = None) -> bytes:
        """The oldest item; waits up to `timeout` s (SharedObjectTimeout then; the item stays in the mailbox)."""
        return self.client.call("mailbox", self.name, "take", timeout=timeout, blocking=True, convert=_value)

    def take_nowait(self) -> bytes | None:
        try:
            return self.client.call("mailbox", self.name, "take", {"nowait": True}, convert=_value)
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
        return self.client.call_async("map", self.name, "put", {"key": key}, value, convert=_none)

    def get(self, key: str) -> bytes | None:
        return self.client.call("map", self.name, "get", {"key": key}, convert=_value)

    def get_async(self, key: str) -> Pending:
        return self.client.call_async("map", self.name, "get", {"key": key}, convert=_value)

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


class DsoHost:
    """Host a job's shared objects on relay nodes that do not hold the job (what a launcher does).

    The relay a job was CREATEd on hosts its objects already; every other
    node gets a DSO_CREATE. The objects live while this host's connections
    are open: ``end()`` (or losing the connection) frees them, ``abort()``
    fails every waiting call. A node that restarts is hosted again as soon
    as it is back (its objects start empty: the ranks' collectives replay
    what they need, see ``dso_collectives``); `on_event` hears about it.
    """

    def __init__(
        self,
        relays: str | Sequence[str],
        job: str,
        token: str,
        *,
        skip: Sequence[str] = (),
        timeout: float = 10.0,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        skipped = {parse_relay_url(s) for s in skip}
        scheme = _scheme_of(relays)
        self.job, self._token, self._timeout = job, token, timeout
        self._on_event = on_event or (lambda _message: None)
        self._lock = threading.Lock()
        self._closed = False
        self.conns: dict[str, RelayConnection] = {}
        try:
            for host, port in parse_relay_urls(relays):
                if (host, port) not in skipped:
                    url = f"{scheme}://{host}:{port}"
                    self.conns[url] = self._host(url)
        except BaseException:
            self.close()
            raise
        for url in self.conns:
            threading.Thread(target=self._keep, args=(url,), name="fmpi-dso-host", daemon=True).start()

    def _host(self, url: str) -> RelayConnection:
        return open_with(url, Kind.DSO_CREATE, {"job": self.job, "token": self._token}, self._timeout)

    def _keep(self, url: str) -> None:
        """Follow one node's connection; when the node restarts, host the job there again once it is back."""
        while True:
            with self._lock:
                conn = self.conns.get(url)
            if conn is None:
                return  # closed
            try:
                while True:
                    conn.recv(timeout=None)  # (nothing it sends matters here)
            except Aborted:
                return  # the ranks hear it too; the job is over
            except (RelayError, OSError):
                pass
            if self._closed:
                return
            self._on_event(f"lost relay node {url}; hosting job {self.job} there again when it is back")

            def attempt(url: str = url) -> RelayConnection | None:
                return None if self._closed else self._host(url)

            back = retry_until(attempt, math.inf, 0.1, lambda exc: isinstance(exc, (RelayError, OSError)))
            if back is None:
                return
            with self._lock:
                if self._closed:
                    back.close()
                    return
                self.conns[url] = back
            self._on_event(f"relay node {url} is back and hosts job {self.job} again")

    def _each(self) -> list[RelayConnection]:
        with self._lock:
            return list(self.conns.values())

    def abort(self, reason: str = "aborted", code: int = 1) -> None:
        for conn in self._each():
            try:
                conn.sock.sendall(encode(Kind.ABORT, {"code": code, "reason": reason}))
            except OSError:
                pass

    def end(self) -> None:
        for conn in self._each():
            try:
                conn.sock.sendall(encode(Kind.END, {"job": self.job}))
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self.conns = list(self.conns.values()), {}
        for conn in conns:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # (wakes the thread that follows it)
            except OSError:
                pass
            conn.close()

    def __enter__(self) -> "DsoHost":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()
