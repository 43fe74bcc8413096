"""Redis faults during whole fmpirun jobs: the server dies mid-job; a message over its proto-max-bulk-len.

Each test starts its own redis-server (one is killed, one gets a small
limit), so the module fixture's server stays as other tests expect it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tests_support import fmpirun_argv, free_port, pids_alive, wait_for_file

PASSWORD = "pw-for-fault-tests"


@pytest.fixture
def own_redis():
    """(process, url, client) of a fresh redis-server on a free port, password required; stopped after the test."""
    import redis

    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/test.sh installs it)"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--requirepass", PASSWORD],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD)
    try:
        wait_for_file(lambda: _answers(client), timeout=10)
        yield proc, f"redis://:{PASSWORD}@127.0.0.1:{port}/0", client
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _answers(client) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


LOOPING = """
import os, sys
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
x, y = np.arange(4.0), np.empty(4)
for i in range(10**9):
    c.Barrier()
    c.Allreduce(x, y)
    if i == 20 and c.rank == 0:
        open(os.path.join(sys.argv[1], "running"), "w").close()  # every rank is past its set-up
"""


def test_redis_killed_mid_job_ends_the_job_with_the_cause_named(own_redis, tmp_path):
    server, url, _client = own_redis
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "loop.py"
    script.write_text(LOOPING)
    proc = subprocess.Popen(
        fmpirun_argv("-n", "3", "--relay", url, "--channel", "relay", sys.executable, str(script), str(pids)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        wait_for_file(lambda: (pids / "running").exists(), timeout=60)
        server.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=15)  # (TimeoutExpired: the job hung on the dead server)
        elapsed = time.monotonic() - killed
    finally:
        if proc.poll() is None:  # it did not end: take it and its ranks down, then fail
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, err
    port = url.rsplit(":", 1)[1]
    assert f"lost Redis at redis://127.0.0.1:{port}" in err, err[-3000:]
    assert PASSWORD not in err
    assert elapsed < 15, f"took {elapsed:.1f} s"
    ranks = [int(p.name) for p in pids.iterdir() if p.name.isdigit()]
    assert len(ranks) == 3
    deadline = time.monotonic() + 5  # (a rank may be between its last write and its exit)
    while pids_alive(ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids_alive(ranks), "rank processes outlived the job"


LARGE_ALLREDUCE = """
import sys
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
x = np.random.default_rng(c.rank).integers(-2**40, 2**40, size=(4 << 20) // 8)  # 4 MiB of int64
y = np.empty_like(x)
c.Allreduce(x, y)
np.save(f"{sys.argv[1]}/rank{c.rank}.npy", y)
"""


def test_an_allreduce_over_the_servers_bulk_limit_is_exact(own_redis, tmp_path):
    # 4 MiB at N = 2: every segment (2 MiB) is over the 1 MB limit, so it must go in pieces.
    _server, url, client = own_redis
    client.config_set("proto-max-bulk-len", "1mb")  # (Redis' minimum)
    script = tmp_path / "allreduce.py"
    script.write_text(LARGE_ALLREDUCE)
    done = subprocess.run(
        fmpirun_argv("-n", "2", "--relay", url, "--channel", "relay", sys.executable, str(script), str(tmp_path)),
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    want = sum(np.random.default_rng(r).integers(-2**40, 2**40, size=(4 << 20) // 8) for r in range(2))
    for r in range(2):
        assert np.array_equal(np.load(tmp_path / f"rank{r}.npy"), want), f"rank {r}"
    assert client.config_get("proto-max-bulk-len") == {"proto-max-bulk-len": "1048576"}
    assert list(client.scan_iter(match="fmpi:*")) == []  # the pieces' keys went with the job's


def test_the_bulk_limit_is_read_from_the_server_or_assumed_where_config_is_refused(own_redis):
    import redis

    from fmpi.rendezvous.redis_connect import DEFAULT_BULK_MAX, bulk_limit

    _server, url, client = own_redis
    client.config_set("proto-max-bulk-len", "2mb")
    assert bulk_limit(client, "here") == 2 << 20
    # A user without CONFIG (as on ElastiCache, where it is renamed away): Redis' default is assumed.
    client.acl_setuser("noconfig", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-config"])
    limited = redis.Redis(host="127.0.0.1", port=int(url.rsplit(":", 1)[1].split("/")[0]), username="noconfig", password="pw")
    try:
        with pytest.raises(redis.ResponseError):
            limited.config_get("proto-max-bulk-len")
        assert bulk_limit(limited, "here") == DEFAULT_BULK_MAX
    finally:
        limited.close()


def test_redis_restarted_mid_job_within_the_rejoin_window_still_ends_the_job_cleanly(own_redis, tmp_path):
    """What docs/redis-relay.md promises today: a Redis that restarts (empty) under a job ends it, clearly,
    at once — it does not wait FMPI_RELAY_REJOIN for Redis, hang, or bring the job's keys back to life."""
    server, url, _client = own_redis
    import redis

    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "loop.py"
    script.write_text(LOOPING)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proc = subprocess.Popen(
        fmpirun_argv("-n", "3", "--relay", url, "--channel", "relay", sys.executable, str(script), str(pids)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    again = None
    try:
        wait_for_file(lambda: (pids / "running").exists(), timeout=60)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        killed = time.monotonic()
        again = subprocess.Popen(  # the same server back on the same port, empty, well within the 30 s window
            [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--requirepass", PASSWORD],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _, err = proc.communicate(timeout=15)  # (TimeoutExpired: the job hung on the restarted server)
        elapsed = time.monotonic() - killed
        client = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD)
        wait_for_file(lambda: _answers(client), timeout=10)
        time.sleep(1)  # (ranks still exiting would write now)
        leftovers = [k for k in client.scan_iter(match="fmpi:*")]
        client.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if again is not None:
            again.kill()
            again.wait(10)
    assert proc.returncode != 0, err
    assert f"lost Redis at redis://127.0.0.1:{port}" in err, err[-3000:]
    assert elapsed < 15, f"took {elapsed:.1f} s"
    assert leftovers == [], f"the job's keys came back in the restarted Redis: {leftovers}"
    ranks = [int(p.name) for p in pids.iterdir() if p.name.isdigit()]
    deadline = time.monotonic() + 5
    while pids_alive(ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids_alive(ranks), "rank processes outlived the job"
