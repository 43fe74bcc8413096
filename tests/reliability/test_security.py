"""Security properties of issue 7 that need real processes: the job secret stays out of process listings
and logs; the relay bounds jobs and registrations and keeps serving through slow-loris clients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from tests_support import fmpirun_argv, pids_alive, wait_for_file

from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.relay_connection import (
    RelayConnection,
    RelayError,
    register,
    wait_world,
)
from fmpi.wire.relay_protocol import Kind, encode

TOKEN = "s" * 24

SLEEPER = r'''
import os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
d = sys.argv[1]
with open(os.path.join(d, f"token-{comm.rank}"), "w") as f:
    f.write(os.environ["FMPI_TOKEN"])
open(os.path.join(d, f"pid-{os.getpid()}"), "w").close()
comm.barrier()
while not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.05)
print(comm.allreduce(comm.rank), flush=True)
'''


def _cmdlines() -> dict[int, bytes]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out[int(entry)] = f.read()
            except OSError:
                pass
    return out


def test_the_job_secret_is_not_in_process_listings_or_verbose_logs(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(SLEEPER)
    env = dict(os.environ, FMPI_DEBUG_LINKS="1")
    proc = subprocess.Popen(
        fmpirun_argv("-v", "-n", "3", "--tag-output", sys.executable, str(prog), str(tmp_path)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        wait_for_file(lambda: len(list(tmp_path.glob("pid-*"))) == 3, 60)
        token = (tmp_path / "token-0").read_text()
        assert len(token) >= 16 and all((tmp_path / f"token-{r}").read_text() == token for r in range(3))
        listings = _cmdlines()
        ranks = [int(p.name[4:]) for p in tmp_path.glob("pid-*")]
        assert all(pid in listings for pid in ranks + [proc.pid])  # we did look at the ranks and fmpirun
        leaks = {pid: cmd for pid, cmd in listings.items() if token.encode() in cmd}
        assert not leaks, f"the job token is in the command line of {leaks}"
        ps = subprocess.run(["ps", "-eo", "pid,args", "-ww"], capture_output=True, text=True)
        if ps.returncode == 0:
            assert token not in ps.stdout
        (tmp_path / "go").touch()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "links:" in stderr  # the verbose output was there, and
    assert token not in stdout and token not in stderr  # the secret was not in it
    assert not pids_alive(ranks)


# ---------------------------------------------------------------- relay limits
@pytest.fixture
def small_relay():
    relay = RelayThread("127.0.0.1", 0, max_jobs=3, max_job_size=8, first_frame_timeout=1.0, probe_port=None)
    yield relay, "tcp://127.0.0.1:{}".format(relay.address[1])
    relay.stop()


def _create(url: str, job: str, size: int = 2) -> RelayConnection:
    conn = RelayConnection(url)
    conn.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": 30})
    conn.expect(Kind.CREATED, 5)
    return conn


def test_jobs_per_relay_are_bounded_and_freed_when_jobs_end(small_relay):
    relay, url = small_relay
    launchers = [_create(url, f"j{i}") for i in range(3)]
    with pytest.raises(RelayError, match="already holds 3 jobs") as info:
        _create(url, "one-too-many")
    assert info.value.code == "limit"
    launchers[0].send(Kind.END, {"job": "j0"})
    launchers[0].close()
    deadline = time.monotonic() + 5
    while True:  # the slot comes back once the relay has seen the END
        try:
            launchers.append(_create(url, "j3"))
            break
        except RelayError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    for c in launchers[1:]:
        c.close()


def test_registrations_per_job_are_bounded_by_its_size(small_relay):
    relay, url = small_relay
    with pytest.raises(RelayError, match="job size must be 1 to 8"):
        _create(url, "huge", size=9)
    launcher = _create(url, "two", size=2)  # (kept open: a launcher that leaves ends its job)
    members = []
    for r in range(2):
        conn = RelayConnection(url)
        register(conn, "two", TOKEN, -1, f"i{r}", [("127.0.0.1", 1)], 5)
        members.append(conn)
    for extra in range(5):  # any number of further ranks: each refused, none takes memory in the job
        conn = RelayConnection(url)
        with pytest.raises(RelayError) as info:
            register(conn, "two", TOKEN, -1, f"x{extra}", [("127.0.0.1", 1)], 5)
        assert info.value.code == "duplicate" and "is full (2 ranks)" in str(info.value)
        conn.close()
    conn = RelayConnection(url)
    with pytest.raises(RelayError, match="outside job 'two' of 2 ranks"):
        register(conn, "two", TOKEN, 5, "far", [("127.0.0.1", 1)], 5)
    job = relay.server.jobs["two"]
    assert len(job.members) == 2
    assert wait_world(members[0], time.monotonic() + 5) == 2
    launcher.close()


def test_many_slow_loris_clients_do_not_block_a_job_and_are_cut_off(small_relay):
    """50 clients send half a header and stall; a job registers and runs meanwhile; the stallers are cut after ~1 s."""
    relay, url = small_relay
    host, port = relay.address
    stalled = []
    for i in range(50):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(encode(Kind.REGISTER, {"job": "x"})[: 1 + i % 7])  # 1..7 bytes of an 8-byte header
        stalled.append(s)
    t0 = time.monotonic()
    launcher = _create(url, "busy", size=2)
    a, b = RelayConnection(url), RelayConnection(url)
    register(a, "busy", TOKEN, 0, "a", [("127.0.0.1", 1)], 5)
    register(b, "busy", TOKEN, 1, "b", [("127.0.0.1", 2)], 5)
    assert wait_world(a, time.monotonic() + 5) == 2
    assert time.monotonic() - t0 < 1.0, "the job waited for the stalled clients"
    for s in stalled:
        s.settimeout(5)
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except OSError:
            pass
        assert b"no request within the time allowed" in data
        s.close()
    assert time.monotonic() - t0 < 5.0
    # a member that stalls mid-frame after joining hurts only itself: the other still gets frames
    a.sock.sendall(encode(Kind.OUTPUT, {"stream": "stdout", "data": "x"})[:5])
    b.send(Kind.OUTPUT, {"stream": "stdout", "data": "still served"})
    launcher.sock.settimeout(5)
    kinds = []
    while "still served" not in str(kinds):
        kinds.append(launcher.recv(5))
    for c in (a, b, launcher):
        c.close()
