"""Name publishing (Publish_name, Lookup_name, Unpublish_name) against MPICH, and across two fmpirun jobs.

Program: tests/compat/programs/names_publish_lookup.py. Each test fails on code without a name service
(the calls raised NotImplementedError).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests_support import fmpirun_argv, written_lines

NAMES = Path(__file__).resolve().parent / "programs" / "names_publish_lookup.py"



@pytest.mark.parametrize("n", [2, 3])
def test_publish_lookup_unpublish_as_mpich(fmpi, mpich, tmp_path, n):
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    run = fmpi(n, NAMES, str(ours), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    run = mpich(n, NAMES, str(ref), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert written_lines(ours) == written_lines(ref)
    assert "publish again 0 error ERR_NAME" in written_lines(ours) and "client got 1 {'hello': 'from the server'}" in written_lines(ours)


def test_where_fmpi_is_stricter_than_mpich(fmpi, program):
    """Unpublish_name compares the port (MPICH withdraws the name whatever the port); arguments are checked as
    mpi4py checks them; a name longer than MAX_PORT_NAME is refused."""
    script = program(
        """
        from mpi4py import MPI
        def attempt(label, call):
            try:
                print(label, "ok", call(), flush=True)
            except MPI.Exception as exc:
                print(label, "error", exc.Get_error_class() in (MPI.ERR_NAME, MPI.ERR_SERVICE) and exc.Get_error_class(),
                      flush=True)
            except TypeError:
                print(label, "TypeError", flush=True)
        port = MPI.Open_port()
        MPI.Publish_name("strict", port)
        attempt("unpublish with another port", lambda: MPI.Unpublish_name("strict", port + "x"))
        attempt("still there", lambda: MPI.Lookup_name("strict") == port)
        attempt("bytes", lambda: MPI.Lookup_name(b"strict") == port)
        attempt("not a string", lambda: MPI.Lookup_name(5))
        attempt("not an Info", lambda: MPI.Publish_name("other", port, 5))
        attempt("too long", lambda: MPI.Publish_name("x" * (MPI.MAX_PORT_NAME + 1), port))
        attempt("empty", lambda: MPI.Lookup_name(""))
        MPI.Unpublish_name("strict", port)
        """
    )
    run = fmpi(1, script, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.lines() == [
        "unpublish with another port error 41", "still there ok True", "bytes ok True", "not a string TypeError",
        "not an Info TypeError", "too long error 33", "empty error 33",
    ]


@pytest.mark.parametrize("backend", ["fmpi-relay", "redis"])
def test_a_client_job_looks_up_a_server_job_through_their_shared_relay(request, program, backend):
    """MPI's server/client pattern across two fmpirun jobs: the service name is all they share. A name the
    server never withdrew ends with its job: a third job does not find it."""
    if backend == "redis":
        relay_url = request.getfixturevalue("redis_server")[0]
    else:
        relay_url = request.getfixturevalue("relay_process")().url
    service = f"fmpi-test-{backend}"
    server = program(
        f"""
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        port = MPI.Open_port() if world.rank == 0 else ""
        if world.rank == 0:
            MPI.Publish_name({service!r}, port)
            MPI.Publish_name({service!r} + "-left", port)  # (never withdrawn: it must end with this job)
        client = world.Accept(port)
        message = client.recv(source=0) if world.rank == 0 else None
        message = world.bcast(message, 0)
        if world.rank == 0:
            client.send(message.upper(), 0)
        print("server", world.rank, client.remote_size, message, flush=True)
        client.Disconnect()
        if world.rank == 0:
            MPI.Unpublish_name({service!r}, port)
            MPI.Close_port(port)
        """
    )
    client = program(
        f"""
        import time
        from mpi4py import MPI
        deadline = time.monotonic() + 60
        while True:  # (the server's job may not have published yet)
            try:
                port = MPI.Lookup_name({service!r})
                break
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_NAME and time.monotonic() < deadline
                time.sleep(0.1)
        server = MPI.COMM_WORLD.Connect(port)
        server.send("hello", 0)
        print("client", server.remote_size, server.recv(source=0), flush=True)
        server.Disconnect()
        """
    )
    jobs = [
        subprocess.Popen(fmpirun_argv("-n", str(n), "--relay", relay_url, sys.executable, str(script)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n, script in ((2, server), (1, client))
    ]
    deadline = time.monotonic() + 120
    outputs = [job.communicate(timeout=max(1.0, deadline - time.monotonic())) for job in jobs]
    for job, (_, err) in zip(jobs, outputs):
        assert job.returncode == 0, err[-3000:]
    assert sorted(outputs[0][0].splitlines()) == ["server 0 1 hello", "server 1 1 hello"]
    assert outputs[1][0].splitlines() == ["client 2 HELLO"]
    after = program(
        f"""
        from mpi4py import MPI
        for name in ({service!r}, {service!r} + "-left"):
            try:
                print(name, MPI.Lookup_name(name), flush=True)
            except MPI.Exception as exc:
                print(name, "gone", exc.Get_error_class() == MPI.ERR_NAME, flush=True)
        """
    )
    run = subprocess.run(fmpirun_argv("-n", "1", "--relay", relay_url, sys.executable, str(after)),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == [f"{service} gone True", f"{service}-left gone True"]
