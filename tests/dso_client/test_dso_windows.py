"""The relay's ``window`` objects (one rank's segment of a relay-hosted MPI window): their methods in a store,
and over real fmpi-relay connections — atomic accumulates, queued locks, locks freed when a client dies, quota."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from fmpi.dso_client.client import DsoClient
from fmpi.dso_client.host import DsoHost
from fmpi.dso_client.node_connection import SharedObjectError
from fmpi.relay_server.dso.objects import DsoError
from fmpi.relay_server.dso.store import OBJECT_OVERHEAD, Store
from tests_support import RelayProcess

TOKEN = "dso-window-token-0123456789"


@pytest.fixture(scope="module")
def relay():
    r = RelayProcess()
    yield r
    r.stop()


@pytest.fixture
def job(relay):
    name = "job-" + uuid.uuid4().hex[:12]
    host = DsoHost(relay.url, name, TOKEN)
    clients: list[DsoClient] = []

    def client() -> DsoClient:
        clients.append(DsoClient(relay.url, name, TOKEN, timeout=20))
        return clients[-1]

    client.name = name
    yield client
    for c in clients:
        c.close()
    host.end()


def test_segment_methods_in_a_store():
    loop = asyncio.new_event_loop()
    try:
        store = Store(loop.create_future, max_bytes=1 << 16, max_value=1 << 16)
        with pytest.raises(DsoError) as e:
            store.call("window", "w", "put", {"runs": [[0, 1]]}, b"x")
        assert e.value.code == "unknown"  # (a segment is created first, with its size)
        store.call("window", "w", "create", {"size": 16}, np.arange(4, dtype="i4").tobytes())
        store.call("window", "w", "acc", {"offset": 4, "runs": [[0, 4], [8, 4]], "op": "sum", "dtype": "<i4"},
                   np.array([10, 20], "i4").tobytes())
        got = store.call("window", "w", "get", {"runs": [[0, 16]]}, b"").payload
        assert np.frombuffer(got, "i4").tolist() == [0, 11, 2, 23]
        old = store.call("window", "w", "acc", {"offset": 0, "runs": [[0, 4]], "op": "replace", "fetch": True},
                         np.array([7], "i4").tobytes()).payload
        assert np.frombuffer(old, "i4").tolist() == [0]
        swap = np.array([7, 9], "i4").tobytes()
        assert np.frombuffer(store.call("window", "w", "cas", {"offset": 0, "n": 4}, swap).payload, "i4").tolist() == [7]
        assert np.frombuffer(store.call("window", "w", "get", {"n": 4}, b"").payload, "i4").tolist() == [9]
        with pytest.raises(DsoError) as e:
            store.call("window", "w", "get", {"offset": 12, "n": 8}, b"")
        assert e.value.code == "range"
        # memory is the job's quota: a segment that does not fit is refused and leaves nothing behind
        assert store.used == OBJECT_OVERHEAD + 16
        with pytest.raises(DsoError) as e:
            store.call("window", "big", "create", {"size": 1 << 16}, b"")
        assert e.value.code == "quota" and "big" not in store.objects and store.used == OBJECT_OVERHEAD + 16
        store.call("any", "w", "drop", {})
        assert store.used == 0
    finally:
        loop.close()


def test_accumulates_from_many_clients_are_atomic(job):
    clients = [job() for _ in range(4)]
    clients[0].window("seg").create(8)

    def work(c: DsoClient) -> None:
        seg = c.window("seg")
        pending = [seg.acc_async(0, [[0, 8]], "<i8", "sum", np.ones(1, "i8"), False) for _ in range(200)]
        for p in pending:
            p.result()

    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.frombuffer(clients[0].window("seg").get_async(0, [[0, 8]]).result(), "i8").tolist() == [800]


def test_an_exclusive_lock_waits_for_the_holders_and_is_freed_when_its_client_goes(job):
    a, b, c = job(), job(), job()
    a.window("seg").create(4)
    a.window("seg").lock(exclusive=True)
    got = []
    waiter = threading.Thread(target=lambda: (b.window("seg").lock(exclusive=False), got.append(time.monotonic())))
    waiter.start()
    time.sleep(0.5)
    assert not got  # (a holds it exclusively)
    with pytest.raises(SharedObjectError) as e:
        c.window("seg").unlock()
    assert e.value.code == "not_locked"
    a.close()  # the holder's connection goes: its lock with it
    waiter.join(10)
    assert got


KILLED_HOLDER = r"""
import sys
from fmpi.dso_client.client import DsoClient
c = DsoClient(sys.argv[1], sys.argv[2], sys.argv[3], timeout=20)
c.window("seg").lock(exclusive=True)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_client_killed_holding_an_exclusive_lock_frees_it(job, relay):
    job().window("seg").create(4)
    holder = subprocess.Popen([sys.executable, "-c", KILLED_HOLDER, relay.url, job.name, TOKEN],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        nxt = job()
        blocked = nxt.window("seg").client.call_async("window", "seg", "lock", {"type": "exclusive"},
                                                       timeout=1.0, blocking=True)
        with pytest.raises(SharedObjectError):
            blocked.result()  # (held by the other process)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        start = time.monotonic()
        nxt.window("seg").lock(exclusive=True)
        assert time.monotonic() - start < 5
        nxt.window("seg").unlock()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_calls_behind_a_waiting_lock_are_held_until_the_grant(job):
    """A client may send Lock, Put, Unlock at once: the relay applies the put only once the lock is granted."""
    a, b = job(), job()
    a.window("seg").create(8)
    a.window("seg").lock(exclusive=True)
    seg = b.window("seg")
    calls = [seg.lock_async(exclusive=True), seg.put_async(0, [[0, 8]], np.full(1, 7, "i8")), seg.unlock_async()]
    time.sleep(0.3)
    assert np.frombuffer(a.window("seg").get_async(0, [[0, 8]]).result(), "i8").tolist() == [0]  # (held)
    a.window("seg").unlock()
    for call in calls:
        call.result(10)
    assert np.frombuffer(a.window("seg").get_async(0, [[0, 8]]).result(), "i8").tolist() == [7]
    a.window("seg").lock(exclusive=True)  # (b's unlock, held too, was applied)
    a.window("seg").unlock()
