"""Ports (Open_port, Accept, Connect, Comm.Join, Close_port) against MPICH, and across two fmpirun jobs.

Program: tests/compat/programs/ports_accept_connect.py. Each test fails on code without ports (the names
were absent: mpi4py's test_dynproc stopped at import).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests_support import fmpirun_argv, written_lines

PORTS = Path(__file__).resolve().parent / "programs" / "ports_accept_connect.py"



@pytest.mark.parametrize("n", [2, 3])
def test_accept_connect_and_join_as_mpich(fmpi, mpich, tmp_path, n):
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    run = fmpi(n, PORTS, str(ours), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    run = mpich(n, PORTS, str(ref), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert written_lines(ours) == written_lines(ref)
    assert "join 1 1 1 0" in written_lines(ours) and len(written_lines(ours)) == 33 + 10 * (n - 2)


def test_a_bad_port_name_is_an_mpi_error_on_every_rank(fmpi, program):
    script = program(
        """
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        try:
            world.Connect("not-a-port" if world.rank == 0 else None)
        except MPI.Exception as exc:
            print("connect", world.rank, exc.Get_error_class() == MPI.ERR_PORT, flush=True)
        try:
            MPI.Close_port("fmpi-port:never:opened")
        except MPI.Exception as exc:
            print("close", world.rank, exc.Get_error_class() == MPI.ERR_PORT, flush=True)
        """
    )
    run = fmpi(2, script, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.sorted_lines() == ["close 0 True", "close 1 True", "connect 0 True", "connect 1 True"]


def test_a_wrong_secret_is_refused_at_once(fmpi, program):
    """A stranger who knows a port's id but not its secret gets ERR_PORT at once; the port still serves."""
    script = program(
        """
        import time
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        if world.rank == 0:
            port = MPI.Open_port()
            world.send(port, 1)
            MPI.COMM_SELF.Accept(port).Disconnect()  # (the stranger must not land here)
        else:
            port = world.recv(source=0)
            forged = port.rsplit(":", 1)[0] + ":" + "f" * 32  # the port's id, another secret
            start = time.monotonic()
            try:
                MPI.COMM_SELF.Connect(forged)
                print("connected with a forged secret", flush=True)
            except MPI.Exception as exc:
                print("refused", exc.Get_error_class() == MPI.ERR_PORT, time.monotonic() - start < 20, flush=True)
            MPI.COMM_SELF.Connect(port).Disconnect()
        """
    )
    run = fmpi(2, script, timeout=90)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.lines() == ["refused True True"]


@pytest.mark.parametrize("backend", ["fmpi-relay", "redis"])
def test_two_fmpirun_jobs_connect_through_their_shared_relay(request, program, tmp_path, backend):
    """Client and server in two jobs (mpi4py's cpi-dpm demo's shape): the port name is all they share."""
    if backend == "redis":
        relay_url = request.getfixturevalue("redis_server")[0]
    else:
        relay_url = request.getfixturevalue("relay_process")().url
    port_file = tmp_path / "port"
    server = program(
        f"""
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        port = MPI.Open_port() if world.rank == 0 else ""
        if world.rank == 0:
            open({str(port_file)!r} + ".tmp", "w").write(port)
            __import__("os").replace({str(port_file)!r} + ".tmp", {str(port_file)!r})
        client = world.Accept(port)
        total = client.allreduce(world.rank + 1)
        print("server", world.rank, client.remote_size, total, flush=True)
        client.Disconnect()
        """
    )
    client = program(
        f"""
        import os, time
        from mpi4py import MPI
        while not os.path.exists({str(port_file)!r}):
            time.sleep(0.05)
        server = MPI.COMM_WORLD.Connect(open({str(port_file)!r}).read())
        total = server.allreduce(100)
        print("client", MPI.COMM_WORLD.rank, server.remote_size, total, flush=True)
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
    # the server's allreduce over the intercommunicator sums the client's values and vice versa
    assert sorted(outputs[0][0].splitlines()) == ["server 0 1 100", "server 1 1 100"]
    assert outputs[1][0].splitlines() == ["client 0 2 3"]
