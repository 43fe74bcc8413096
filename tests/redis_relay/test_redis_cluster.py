"""``--relay redis://`` on a real Redis Cluster (the module's ``redis_cluster``: three masters and a spare
master that serves no slot).

fmpi finds the node serving the job's slot (all of a job's keys carry one
hash tag) and talks to it with the plain client paths. Whole jobs pointed at
the spare are always redirected; each must give the direct run's results,
run its scripts on exactly one master (the slot's owner), and leave no
``fmpi:*`` key on any node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis.cluster
from redis.crc import key_slot
from tests_support import fmpirun_argv, free_port, verdict

from fmpi.rendezvous import redis_connect
from fmpi.rendezvous.redis import RedisJob, RedisRank, connect
from fmpi.rendezvous.relay_connection import RelayError

TESTS = Path(__file__).resolve().parents[1]
PROGRAMS = TESTS / "collectives" / "programs"
P2P = TESTS / "p2p" / "p2p_semantics.py"

_direct: dict[tuple[str, int], list[str]] = {}


def fmpirun(n: int, program: Path, *args: str, relay: str | None = None, channel: str = "relay", timeout: float = 300):
    extra = [*(["--relay", relay] if relay else []), "--channel", channel]
    return subprocess.run(
        fmpirun_argv("-n", str(n), *extra, sys.executable, str(program), *args),
        capture_output=True, text=True, timeout=timeout, cwd=str(program.parent), env=dict(os.environ),
    )


def results(program: Path, n: int, tmp_path: Path, label: str, *args: str, **kw) -> list[str]:
    out = tmp_path / label
    out.mkdir()
    done = fmpirun(n, program, *args, str(out), **kw)
    assert done.returncode == 0, f"{program.name} -n {n} {label}: exit {done.returncode}\n{done.stderr[-4000:]}"
    lines = sorted(line for f in out.glob("rank*.txt") for line in f.read_text().splitlines())
    assert len(lines) >= 5 * n, f"{label}: only {len(lines)} result lines"
    return lines


def direct(program: Path, n: int, tmp_path: Path, *args: str) -> list[str]:
    key = (program.name, n)
    if key not in _direct:
        _direct[key] = results(program, n, tmp_path, "direct", *args, channel="direct")
    return _direct[key]


def job_on_another_node(cluster, port: int) -> str:
    """A job id whose keys' slot is not served by `port`."""
    for i in range(1000):
        job = f"jcluster{i}"
        if cluster.owner(f"fmpi:{{{job}}}:meta") != port:
            return job
    raise AssertionError("every job id hashed to one node")


def scripts_ran_on_one_master(cluster, before: dict[int, int]) -> int:
    """The port of the only node whose EVALSHA count grew since `before` (never the spare)."""
    grew = [p for p, calls in cluster.evalsha_calls().items() if calls > before[p]]
    assert len(grew) == 1 and grew[0] != cluster.spare, f"scripts ran on {grew} (spare {cluster.spare})"
    return grew[0]


# ------------------------------------------------------------- connecting
@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_connect_lands_on_the_node_serving_the_job(redis_cluster, which):
    cluster = redis_cluster
    port = cluster.ports[which]
    job = job_on_another_node(cluster, port)
    owner = cluster.owner(f"fmpi:{{{job}}}:meta")
    client = connect(cluster.url(port), job=job)
    try:
        assert isinstance(client, redis.cluster.RedisCluster)
        assert client.get_node_from_key(f"fmpi:{{{job}}}:meta").port == owner
        client.set(f"fmpi:{{{job}}}:probe", b"x", ex=5)  # a keyed command: no MOVED
        client.delete(f"fmpi:{{{job}}}:probe")
    finally:
        client.close()
    # The rank's registration connection: bound to its shared port, on the owner, seen from that port.
    shared = free_port()
    bound = connect(cluster.url(port), source=("127.0.0.1", shared), job=job)
    try:
        assert bound.connection_pool.connection_kwargs["port"] == owner
        assert bound.client_info()["addr"] == f"127.0.0.1:{shared}"
    finally:
        bound.close()


def test_a_bound_connection_to_the_slots_own_master_stays_open(redis_cluster):
    """A rank's registration connection through the URL of the very master that serves its job: the connection that
    found out is the one kept, seen from the rank's port (the other nodes' case is the test above)."""
    cluster = redis_cluster
    port = cluster.ports[0]
    job = next(f"jhome{i}" for i in range(1000) if cluster.owner(f"fmpi:{{jhome{i}}}:meta") == port)
    shared = free_port()
    for _ in range(2):  # (the second: a process whose first client for the job already found the node)
        bound = connect(cluster.url(port), source=("127.0.0.1", shared), job=job)
        try:
            assert bound.client_info()["addr"] == f"127.0.0.1:{shared}"
            assert bound.connection_pool.connection_kwargs["port"] == port
        finally:
            bound.close()
        shared = free_port()


def test_rendezvous_through_a_node_that_does_not_own_the_job(redis_cluster):
    cluster = redis_cluster
    job = job_on_another_node(cluster, cluster.spare)
    url = cluster.url(cluster.spare)
    events: list[str] = []
    launcher = RedisJob(url, job, "tok", 2, 30, lambda kind, body: events.append(kind))
    ranks = [RedisRank(url, job, "tok", source=("127.0.0.1", free_port())) for _ in range(2)]
    try:
        for i, member in enumerate(ranks):
            assert member.register(-1, f"inc{i}", [("127.0.0.1", 1000 + i)]) == (i, 2)
        assert ranks[1].wait_world(time.monotonic() + 10) == 2
        peers = ranks[1].lookup([0, 1])["peers"]
        assert [p["rank"] for p in peers] == [0, 1] and peers[0]["observed"][0] == "127.0.0.1"
        assert cluster.fmpi_keys().keys() == {cluster.owner(f"fmpi:{{{job}}}:meta")}
    finally:
        for member in ranks:
            member.close()
        launcher.end()
    assert cluster.fmpi_keys() == {}


def test_a_db_other_than_0_is_refused(redis_cluster):
    with pytest.raises(RelayError, match=r"is a Redis Cluster, which has only db 0: use redis://127\.0\.0\.1:\d+/0") as info:
        connect(redis_cluster.url(redis_cluster.ports[0], db=3), job="jdb")
    assert info.value.code == "bad_url"
    assert redis_cluster.password not in str(info.value)


def test_a_moved_slot_during_registration_is_a_clear_error(redis_cluster, monkeypatch):
    """The registration connection (bound to the rank's shared port, so no cluster client) talking to a node that
    no longer serves the job's slot fails with a clear error."""
    cluster = redis_cluster
    job = job_on_another_node(cluster, cluster.spare)
    url = cluster.url(cluster.spare)
    monkeypatch.setitem(redis_connect._job_nodes, (url, job), (url, True))  # as if the slot had been on the spare
    member = RedisRank(url, job, "t" * 32, source=("127.0.0.1", free_port()))
    try:
        with pytest.raises(RelayError, match=r"the job's Redis Cluster slot \d+ moved to 127\.0\.0\.1:\d+ while the rank registered") as info:
            member.register(0, "i", [("127.0.0.1", 1000)])
        assert info.value.code == "moved"
    finally:
        member.close()


FOLLOWER = """
import sys, time
import numpy as np
from mpi4py import MPI
from fmpi.api import runtime
comm = MPI.COMM_WORLD
total = 0
for i in range(int(sys.argv[1])):
    if comm.rank == 0:
        comm.send((i, b"x" * 50000), dest=1, tag=i)
        assert comm.recv(source=1, tag=i) == (i, b"x" * 50000)
    else:
        comm.send(comm.recv(source=0, tag=i), dest=0, tag=i)
    out = np.zeros(3, "i8")
    comm.Allreduce(np.full(3, i, "i8"), out)
    total += int(out[0])
    time.sleep(0.02)
print("rank", comm.rank, "total", total, "server", runtime.server_collective_calls().get("allreduce", 0), flush=True)
"""


def test_a_job_follows_its_slot_when_the_cluster_moves_it(redis_cluster, tmp_path):
    """Resharding while a job runs: its slot (every key of the job) migrates to another master mid-job; the ranks'
    relayed messages, server-side collectives and the launcher follow it, and the job ends as if nothing happened."""
    cluster = redis_cluster
    program = tmp_path / "follower.py"
    program.write_text(FOLLOWER)
    rounds = 400
    proc = subprocess.Popen(
        fmpirun_argv("-n", "2", "--relay", cluster.url(cluster.ports[0]), "--channel", "relay", sys.executable,
                     str(program), str(rounds)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 60
        metas: list[bytes] = []
        while not metas:
            assert time.monotonic() < deadline and proc.poll() is None, "the job never showed up in the cluster"
            metas = [k for keys in cluster.fmpi_keys().values() for k in keys if k.endswith(b":meta")]
            time.sleep(0.1)
        job = metas[0].decode().split("{", 1)[1].split("}", 1)[0]
        while not any(k.endswith(b":finished") or b":mbox:" in k for keys in cluster.fmpi_keys().values() for k in keys):
            assert time.monotonic() < deadline and proc.poll() is None, "the ranks never relayed through the cluster"
            time.sleep(0.05)
        old = cluster.owner(f"fmpi:{{{job}}}:meta")
        target = cluster.spare if old != cluster.spare else cluster.ports[0]
        before = cluster.evalsha_calls()
        cluster.move_slot(key_slot(f"{{{job}}}".encode()), target)
        assert proc.poll() is None, "the job ended before its slot moved: make it longer"
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    total = 2 * sum(range(rounds))
    assert proc.returncode == 0, err[-4000:]
    lines = sorted(line for line in out.splitlines() if line.startswith("rank"))
    assert lines == [f"rank {r} total {total} server {rounds}" for r in (0, 1)], out[-2000:]  # (every Allreduce on Redis)
    assert cluster.evalsha_calls()[target] > before[target], "nothing ran on the slot's new master"
    assert cluster.fmpi_keys() == {}


# ------------------------------------------------------------- whole jobs
@pytest.mark.parametrize("node", ["spare", "first"])
def test_collectives_job_matches_the_direct_run(redis_cluster, tmp_path, node):
    cluster = redis_cluster
    port = cluster.spare if node == "spare" else cluster.ports[0]
    program = PROGRAMS / "diff_uppercase.py"
    ref = direct(program, 4, tmp_path)
    before = cluster.evalsha_calls()
    assert results(program, 4, tmp_path, f"cluster-{node}", relay=cluster.url(port)) == ref
    scripts_ran_on_one_master(cluster, before)
    assert cluster.fmpi_keys() == {}


def test_p2p_job_matches_the_direct_run(redis_cluster, tmp_path):
    cluster = redis_cluster
    nbytes = str(3 << 20)  # a dozen 256 KiB chunks per message through the owner's mailboxes, in order
    ref = direct(P2P, 4, tmp_path, nbytes)
    before = cluster.evalsha_calls()
    ours = results(P2P, 4, tmp_path, "cluster", nbytes, relay=cluster.url(cluster.spare))
    assert ours == ref
    owner = scripts_ran_on_one_master(cluster, before)
    assert cluster.evalsha_calls()[owner] - before[owner] > 16, "the frames did not go through Redis"
    assert cluster.fmpi_keys() == {}


def test_server_side_collectives_on_the_cluster(redis_cluster):
    cluster = redis_cluster
    before = cluster.evalsha_calls()
    done = fmpirun(4, PROGRAMS / "check_server_side.py", relay=cluster.url(cluster.spare))
    verdict(done, "check_server_side -n 4 on a Redis Cluster")
    calls = {int(m.group(1)): json.loads(m.group(2)) for m in re.finditer(r"^SERVER (\d+) (.*)$", done.stdout, re.MULTILINE)}
    assert sorted(calls) == [0, 1, 2, 3], done.stdout[-2000:]
    for r, c in calls.items():
        assert c.get("allreduce", 0) >= 15 and c.get("barrier", 0) >= 2, f"rank {r} did not use the server: {c}"
    owner = scripts_ran_on_one_master(cluster, before)
    assert cluster.evalsha_calls()[owner] - before[owner] >= sum(c["allreduce"] + c["barrier"] for c in calls.values())
    assert cluster.fmpi_keys() == {}
