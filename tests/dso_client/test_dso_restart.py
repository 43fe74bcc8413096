"""A sharded relay node that restarts mid-job: no collective loses, repeats or reorders a contribution.

Real `fmpi-relay` processes: node A holds the job (rendezvous), node B only
hosts shared objects; B is killed outright (SIGKILL) while ranks are inside
collectives on it, and started again on the same port. The launcher's
``DsoHost`` hosts the job on B again, the ranks reconnect and replay
(``dso_collectives``), and every round's result is exactly what it must be.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
from tests_support import RelayProcess, fmpirun_argv

from fmpi.dso_client.client import DsoClient
from fmpi.dso_client.collectives import DsoCollectives
from fmpi.dso_client.host import DsoHost
from fmpi.dso_client.node_connection import SharedObjectError

TOKEN = "dso-restart-token-0123456789"
RANKS = 3
ROUNDS = 100


def _urls(a: RelayProcess, b: RelayProcess) -> str:
    return "tcp://{}:{},{}:{}".format(*a.address, *b.address)


def _key_on(client: DsoClient, barrier_node: str, reducer_node: str) -> str:
    """A communicator key whose barrier and first reducer live on the nodes given."""
    for i in range(10_000):
        key = f"k{i}"
        if client.ring.node(f"fmpi.b.{key}") == barrier_node and client.ring.node(f"fmpi.r.{key}.0") == reducer_node:
            return key
    raise AssertionError("no such key")


ELEMENTS = 1 << 18  # 2 MiB of int64 per contribution: a kill often lands while replies are still being written


def _contribution(rank: int, round_: int) -> np.ndarray:
    return np.arange(ELEMENTS, dtype=np.int64) * (rank + 1) + round_ * 1000 + rank


def _restart(
    node: RelayProcess, at: list[float], down_for: float, started: list[RelayProcess] | None = None
) -> tuple[threading.Thread, list[RelayProcess]]:
    """Kill `node` outright at each time of `at` (s from now) and start it again on the same port `down_for` s later.

    The relays started are appended to `started` (a new list if None), which is returned with the thread."""
    started = [] if started is None else started
    t0 = time.monotonic()

    def run() -> None:
        current = node
        for when in at:
            time.sleep(max(0.0, t0 + when - time.monotonic()))
            current.proc.kill()
            current.proc.wait()
            time.sleep(down_for)
            current = RelayProcess("--port", str(node.address[1]))
            started.append(current)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, started


@dataclass
class ShardedJob:
    a: RelayProcess  # holds the job
    b: RelayProcess  # holds only shared objects: the node the tests restart
    ranks: list[DsoCollectives]
    restarted: list[RelayProcess]  # B's successors, stopped with the rest

    def key(self, barrier_on: RelayProcess, reducer_on: RelayProcess) -> str:
        return _key_on(self.ranks[0].client, "{}:{}".format(*barrier_on.address), "{}:{}".format(*reducer_on.address))


@contextmanager
def _sharded_job(ranks: int, recover_within: float) -> Iterator[ShardedJob]:
    """A job on relays A and B, hosted as the launcher does (``DsoHost``), with `ranks` ranks' collectives."""
    a, b = RelayProcess(), RelayProcess()
    job = "job-" + uuid.uuid4().hex[:12]
    host = DsoHost(_urls(a, b), job, TOKEN)
    sharded = ShardedJob(a, b, [DsoCollectives(_urls(a, b), job, TOKEN, recover_within=recover_within) for _ in range(ranks)], [])
    try:
        yield sharded
    finally:
        for c in sharded.ranks:
            c.close()
        host.end()
        for relay in (a, b, *sharded.restarted):
            relay.stop()


@pytest.mark.parametrize("layout", ["both_on_b", "barrier_on_a"])
@pytest.mark.parametrize("seed", range(3))
def test_collectives_on_a_restarted_node_lose_and_repeat_nothing(layout, seed):
    # A kill that lands while the relay writes a round's results may leave
    # some ranks with the result and others without: those repeat the round
    # on the empty node, and only the others' replays can complete it. With
    # the barrier on A, a rank that has its result waits on A and never
    # talks to B: it must notice B's restart by itself (the hang-up watch).
    with _sharded_job(RANKS, recover_within=20) as job:
        _lose_and_repeat_nothing(job, job.key(job.b if layout == "both_on_b" else job.a, job.b), seed)


def _lose_and_repeat_nothing(job: ShardedJob, key: str, seed: int) -> None:
    ranks = job.ranks
    sums: list[list[int]] = [[] for _ in range(RANKS)]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        out = np.empty(ELEMENTS, dtype=np.int64)
        try:
            for round_ in range(ROUNDS):
                ranks[r].allreduce(key, round_, r, RANKS, _contribution(r, round_), "sum", out)
                sums[r].append(int(out.sum()) if np.array_equal(out, want[round_]) else -1)
                ranks[r].barrier(key, round_, r, RANKS)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    want = [sum(_contribution(r, round_) for r in range(RANKS)) for round_ in range(ROUNDS)]
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    rng = random.Random(seed)
    at = [0.2 + rng.random() * 0.3, 0.9 + rng.random() * 0.3, 1.6 + rng.random() * 0.3]
    killer, restarted = _restart(job.b, at=at, down_for=0.1, started=job.restarted)
    for t in threads:
        t.join(60)
    killer.join()
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    assert not errors, errors
    for r in range(RANKS):
        assert sums[r] == [int(w.sum()) for w in want], f"rank {r}: wrong or missing rounds"
    assert len(restarted) == 3 and restarted[-1].proc.poll() is None  # (the restarts really happened mid-run)


@pytest.mark.parametrize("layout", ["both_on_b", "barrier_on_a"])
def test_a_first_call_on_a_node_that_is_restarting_waits_for_it(layout):
    # A rank connects to a node on its first call there: when the node is down at that moment
    # (restarting), the call waits for it as for a lost connection, instead of failing the job.
    with _sharded_job(RANKS, recover_within=20) as job:
        _first_calls_wait(job, job.key(job.b if layout == "both_on_b" else job.a, job.b))


def _first_calls_wait(job: ShardedJob, key: str) -> None:
    ranks = job.ranks
    results: list[int] = []
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        out = np.empty(ELEMENTS, dtype=np.int64)
        try:
            ranks[r].barrier(key, 0, r, RANKS)
            ranks[r].allreduce(key, 0, r, RANKS, _contribution(r, 0), "sum", out)
            results.append(int(out.sum()))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    job.b.proc.kill()  # before any rank ever talked to B
    job.b.proc.wait()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    job.restarted.append(RelayProcess("--port", str(job.b.address[1])))
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    assert not errors, errors
    assert results == [int(sum(_contribution(r, 0) for r in range(RANKS)).sum())] * RANKS


def test_a_node_that_does_not_come_back_is_a_clear_error_in_bounded_time():
    with _sharded_job(2, recover_within=1.5) as job:
        key = job.key(job.b, job.b)
        job.ranks[0].barrier(key, 0, 0, 1)  # (a barrier of one: the connection to B is up)
        job.b.proc.kill()
        job.b.proc.wait()
        start = time.monotonic()
        with pytest.raises(SharedObjectError, match=r"lost relay node tcp://127\.0\.0\.1:\d+, and it did not come back within 1\.5 s"):
            job.ranks[0].barrier(key, 1, 0, 2)
        assert time.monotonic() - start < 10


RESTART_PROGRAM = """
import sys
import numpy as np
from mpi4py import MPI
world = MPI.COMM_WORLD
comms = [world.Dup() for _ in range(6)]  # six keys: their objects spread over both relay nodes
open(sys.argv[1] + f".{world.rank}", "w").close()  # (started: the test may restart a node now)
total = 0
for step in range(int(sys.argv[2])):
    for i, c in enumerate(comms):
        x = np.full(3, (c.rank + 1) * (step + 1) + i, dtype=np.int64)
        y = np.empty_like(x)
        c.Allreduce(x, y, op=MPI.SUM)
        c.Barrier()
        total += int(y.sum())
print("total", total)
"""


def test_a_job_survives_a_restart_of_one_of_its_relay_nodes(tmp_path):
    a, b = RelayProcess(), RelayProcess()
    restarted: list[RelayProcess] = []
    prog = tmp_path / "prog.py"
    prog.write_text(RESTART_PROGRAM)
    n, steps = 3, 400
    want = sum(3 * sum((r + 1) * (s + 1) + i for r in range(n)) for s in range(steps) for i in range(6))
    try:
        proc = subprocess.Popen(
            fmpirun_argv("-n", str(n), "--relay", _urls(a, b), "--channel", "relay", sys.executable, str(prog),
                         str(tmp_path / "started"), str(steps)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("started.*"))) < n and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        killer, restarted = _restart(b, at=[0.3], down_for=0.3)
        out, err = proc.communicate(timeout=120)
        killer.join()
        assert proc.returncode == 0, err
        assert out.split().count("total") == n and all(int(v) == want for v in out.split()[1::2]), out
        assert "lost relay node" in err and "is back and hosts job" in err, err  # the launcher saw it happen
    finally:
        for relay in (a, b, *restarted):
            relay.stop()


def test_a_first_relay_that_does_not_come_back_ends_the_job_with_a_clear_error(tmp_path):
    # The first relay holds the job itself (rendezvous, relayed links, output). Everyone waits
    # FMPI_RELAY_REJOIN for it to come back (tests/launcher/test_relay_restart.py); when it does not,
    # the job ends, promptly and saying so; fmpirun must not die of a write to the dead relay (SIGPIPE).
    a, b = RelayProcess(), RelayProcess()
    prog = tmp_path / "prog.py"
    prog.write_text(RESTART_PROGRAM)
    try:
        proc = subprocess.Popen(
            fmpirun_argv("-n", "3", "--relay", _urls(a, b), "--channel", "relay", sys.executable, str(prog),
                         str(tmp_path / "started"), "100000"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, FMPI_RELAY_REJOIN="2"),
        )
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("started.*"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        a.proc.kill()
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, (proc.returncode, err)
        assert time.monotonic() - killed < 15
        assert f"lost the connection to the relay at {_urls(a, b)}" in err, err
        assert "waiting up to 2 s for it to come back" in err, err
    finally:
        a.stop()
        b.stop()
