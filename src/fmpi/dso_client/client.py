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
node (``node_connection.py``), opened on first use; calls can be pipelined
(``*_async`` return a ``Pending``) and made from several threads.

Values are bytes (or any buffer); numpy arrays travel as raw bytes with
their dtype, never pickled. A call that waits on the server (take, barrier,
allreduce) sends its timeout along, so the server gives up at the same time
and a mailbox item is never handed to a caller that stopped waiting.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..rendezvous.relay_connection import (
    RelayError,
)
from ..rendezvous.urls import relay_addresses, relay_scheme
from ..util.retry import retry_until
from .hash_ring import HashRing
from .node_connection import NodeConnection, Pending, SharedObjectError
from .refs import CounterRef, MailboxRef, MapRef, WindowRef, no_value

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


def scheme_of(spec: str | Sequence[str]) -> str:
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
        self.scheme = scheme_of(relays)
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
    def mailbox(self, name: str) -> MailboxRef:
        return MailboxRef(self, name)

    def counter(self, name: str) -> CounterRef:
        return CounterRef(self, name)

    def map(self, name: str) -> MapRef:
        return MapRef(self, name)

    def window(self, name: str) -> WindowRef:
        return WindowRef(self, name)

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
        return self.call_async("barrier", name, "wait", args, timeout=timeout, blocking=True, convert=no_value)

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
