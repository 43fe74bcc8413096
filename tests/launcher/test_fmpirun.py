"""fmpirun end to end: real launcher, real rank processes, real relay.

Covers the command line's bad input, how failures end a job (exit status,
message naming the rank), and that no rank process outlives its job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests_support import fmpirun_argv, pids_alive, wait_for_file

PY = sys.executable


def run(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(fmpirun_argv(*args), capture_output=True, text=True, timeout=timeout, **kw)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "0", PY, "-c", "pass"], "-n must be at least 1"),
        (["-n", "-3", PY, "-c", "pass"], "-n must be at least 1"),
        ([PY, "-c", "pass"], "the number of ranks is required"),
        (["-n", "2"], "no program given"),
        (["-n", "2", PY, "does/not/exist.py"], "script not found: does/not/exist.py"),
        (["-n", "2", "does_not_exist.py"], "script not found: does_not_exist.py"),
        (["-n", "2", "no-such-program-xyz"], "program not found: no-such-program-xyz"),
        (["-n", "2", "--relay", "http://x:1", PY, "-c", "pass"], "unsupported relay URL"),
        (["-n", "2", "--fill-timeout", "0", PY, "-c", "pass"], "--fill-timeout must be positive"),
    ],
)
def test_bad_command_lines_get_one_clear_error(args, message):
    result = run(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("error:") == 1


def test_unreachable_relay_is_named():
    result = run("-n", "2", "--relay", "tcp://127.0.0.1:1", PY, "-c", "pass")
    assert result.returncode == 1
    assert "cannot reach the relay at tcp://127.0.0.1:1" in result.stderr


# ----------------------------------------------------------- normal running
def test_output_is_streamed_and_tagged(program):
    prog = program(
        """
        from mpi4py import MPI
        import sys
        c = MPI.COMM_WORLD
        print(f"out {c.rank}")
        print(f"err {c.rank}", file=sys.stderr)
        """
    )
    result = run("-n", "3", "--tag-output", PY, str(prog))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] out 0", "[1] out 1", "[2] out 2"]
    assert sorted(result.stderr.splitlines()) == ["[0] err 0", "[1] err 1", "[2] err 2"]


def test_bare_script_and_module_forms(program):
    prog = program("from mpi4py import MPI\nprint(MPI.COMM_WORLD.size)\n")
    assert run("-n", "2", str(prog)).stdout.split() == ["2", "2"]
    via_module = subprocess.run(
        [PY, "-m", "fmpi", "-n", "2", PY, "-c", "from mpi4py import MPI; print(MPI.COMM_WORLD.rank)"],
        capture_output=True, text=True, timeout=60,
    )
    assert sorted(via_module.stdout.split()) == ["0", "1"], via_module.stderr


def test_script_arguments_reach_the_program(program):
    prog = program("import sys\nfrom mpi4py import MPI\nprint(sys.argv[1:])\n")
    result = run("-n", "1", PY, str(prog), "--flag", "value with spaces")
    assert result.stdout.strip() == "['--flag', 'value with spaces']"


def test_mpi4py_import_resolves_to_fmpi_only_under_fmpirun(program):
    prog = program(
        """
        import fmpi.MPI
        from mpi4py import MPI
        print(MPI is fmpi.MPI, MPI.Get_library_version().split()[0])
        """
    )
    assert run("-n", "2", PY, str(prog)).stdout.split() == ["True", "fmpi"] * 2
    # The real mpi4py (installed in this environment as the test reference) is untouched outside fmpirun.
    real = subprocess.run(
        [PY, "-c", "from mpi4py import MPI; print(MPI.Get_library_version().split()[0])"],
        capture_output=True, text=True, timeout=60,
    )
    assert real.stdout.strip() == "MPICH"


def test_plain_python_is_a_world_of_one(program):
    prog = program(
        """
        from fmpi import MPI
        c = MPI.COMM_WORLD
        c.send({"x": 1}, dest=0, tag=3)
        print(c.rank, c.size, c.recv(source=0, tag=3), MPI.Is_initialized())
        """
    )
    result = subprocess.run([PY, str(prog)], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "0 1 {'x': 1} True", result.stderr


# ------------------------------------------------------------------ failures
BLOCKED_PEERS = """
import os, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
open(os.path.join({pids!r}, str(os.getpid())), "w").close()
if c.rank == {bad}:
    time.sleep(0.3)
    {action}
c.recv(source={bad})  # everyone else waits on the failing rank forever
"""


@pytest.mark.parametrize(
    "action, code, message",
    [
        ("sys.exit(3)", 3, "rank 1 exited with status 3"),
        ("raise ValueError('boom')", 1, "uncaught ValueError on rank 1: boom"),
        ("c.Abort(5)", 5, "job aborted by rank 1"),
        ("os.kill(os.getpid(), 9)", 137, "rank 1 was killed by signal SIGKILL"),
        ("os._exit(4)", 4, "rank 1 exited with status 4"),
    ],
)
def test_a_failing_rank_ends_the_job_and_is_named(program, tmp_path, action, code, message):
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = program(BLOCKED_PEERS.format(pids=str(pids), bad=1, action=action))
    result = run("-n", "4", PY, str(prog), timeout=60)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert len(list(pids.iterdir())) == 4
    assert not pids_alive(int(p.name) for p in pids.iterdir())


@pytest.mark.parametrize("slow_exit", [False, True], ids=["", "slow-exit"])
@pytest.mark.parametrize("action", ["sys.exit(3)", "os._exit(3)"])
def test_a_rank_that_exits_mid_collective_is_blamed_alone_with_its_status(action, slow_exit):
    """The peers fail on it ("rank 1 has finalized" / "is gone") but are consequences: no tracebacks of theirs,
    and fmpirun names rank 1 with its own exit status, as mpiexec does. Also when rank 1 takes longer to end after
    it finalized than fmpirun waits before it stops the others (a loaded machine: the blame must not turn)."""
    linger = "import atexit, time; atexit.register(time.sleep, 4); " if slow_exit else ""  # (runs after fmpi's)
    code = f"{linger}import os, sys; from mpi4py import MPI; c = MPI.COMM_WORLD; c.rank == 1 and {action}; c.Barrier()"
    result = run("-n", "4", PY, "-c", code, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "fmpirun: rank 1 exited with status 3" in result.stderr
    assert "Traceback" not in result.stderr and "aborted by rank" not in result.stderr, result.stderr


KILLED_IN_A_COLLECTIVE = """
import os
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
x, y = np.ones(4), np.empty(4)
c.Allreduce(x, y)  # every link is up
if c.rank == {bad}:
    os.kill(os.getpid(), 9)
for _ in range(100000):
    c.Allreduce(x, y, op=MPI.MAX)  # the others block on the dead rank
"""


@pytest.mark.parametrize("channel", ["direct", "relay"])
def test_a_rank_killed_in_a_collective_is_named_not_the_ranks_that_noticed(program, channel):
    # The survivors fail with "rank 2 is gone" or, once fmpirun has aborted
    # the job, "job aborted"; some raise and abort in turn. Their aborts say
    # they are consequences (a structured cause, not words in a message), so
    # fmpirun reports the kill — whichever of the reports reaches it first.
    prog = program(KILLED_IN_A_COLLECTIVE.format(bad=2))
    result = run("-n", "4", "--channel", channel, PY, str(prog), timeout=60)
    assert result.returncode == 137, result.stderr
    assert "rank 2 was killed by signal SIGKILL" in result.stderr

def test_a_rank_that_stops_responding_is_found_by_its_missing_heartbeat(program, tmp_path):
    # SIGSTOP: the process lives and its kernel still answers TCP, so no link
    # or connection breaks; only the heartbeats to the relay stop.
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = program(BLOCKED_PEERS.format(pids=str(pids), bad=1, action="os.kill(os.getpid(), 19)"))
    start = time.monotonic()
    result = run("-n", "3", PY, str(prog), timeout=60)
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result.stderr
    assert "rank 1 stopped responding (no heartbeat for" in result.stderr
    assert elapsed < 20, f"took {elapsed:.1f} s"  # the default bound is about 5 s after the stop
    assert not pids_alive(int(p.name) for p in pids.iterdir())


def test_a_world_that_never_fills_names_the_missing_rank(program, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = program(
        f"""
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        if os.environ["FMPI_RANK"] == "1":
            time.sleep(600)  # never joins
        from mpi4py import MPI
        """
    )
    # (3 s: on a loaded machine the two others may take over a second to start and join)
    result = run("-n", "3", "--fill-timeout", "3", PY, str(prog))
    assert result.returncode != 0
    assert "2 of 3 ranks joined; missing ranks: 1" in result.stderr
    assert not pids_alive(int(p.name) for p in pids.iterdir())


def _sleeping_ranks(program, tmp_path):
    """A program whose ranks join, record their pid in the returned folder, and sleep."""
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = program(
        f"""
        import os, time
        from mpi4py import MPI
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        time.sleep(600)
        """
    )
    return prog, pids


def _sigint_default() -> None:
    # As at a terminal. (A suite started as a shell's background job inherits SIGINT ignored,
    # and a process started that way rightly ignores Ctrl-C.)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_stops_every_rank(program, tmp_path):
    prog, pids = _sleeping_ranks(program, tmp_path)
    proc = subprocess.Popen(fmpirun_argv("-n", "3", PY, str(prog)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)
    wait_for_file(lambda: len(list(pids.iterdir())) == 3, timeout=30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "interrupted" in err
    assert not pids_alive(int(p.name) for p in pids.iterdir())


def test_killing_fmpirun_outright_takes_the_ranks_with_it(program, tmp_path):
    prog, pids = _sleeping_ranks(program, tmp_path)
    proc = subprocess.Popen(fmpirun_argv("-n", "2", PY, str(prog)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_file(lambda: len(list(pids.iterdir())) == 2, timeout=30)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while pids_alive(int(p.name) for p in pids.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pids_alive(int(p.name) for p in pids.iterdir())


# ------------------------------------------------------- joining by hand
def test_ranks_joined_by_hand_form_one_job(program, tmp_path):
    prog = program("from mpi4py import MPI\nc = MPI.COMM_WORLD\nprint('sum', c.allreduce(c.rank + 1))\n")
    host = subprocess.Popen(
        fmpirun_argv("-n", "2", "--print-join"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lines = [host.stdout.readline() for _ in range(2)]
        join_line = lines[1].split()
        assert join_line[0].startswith("FMPI_TOKEN=") and join_line[1] == "fmpirun"
        env = dict(os.environ, FMPI_TOKEN=join_line[0].split("=", 1)[1])
        join_args = join_line[2:-2]  # drop the example "python app.py"
        ranks = [
            subprocess.Popen(fmpirun_argv(*join_args, PY, str(prog)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2)
        ]
        outputs = [r.communicate(timeout=60) for r in ranks]
        assert [r.returncode for r in ranks] == [0, 0], outputs
        assert [o[0].strip() for o in outputs] == ["sum 3", "sum 3"]
        assert host.wait(timeout=30) == 0
    finally:
        host.kill()


def test_print_join_shows_the_real_program_and_an_address_other_hosts_can_use():
    host = subprocess.Popen(
        fmpirun_argv("-n", "2", "--print-join", "--relay-listen", "0.0.0.0:0", "python", "my prog.py", "--steps", "3"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = [host.stdout.readline() for _ in range(4)]
    finally:
        host.kill()
        host.communicate()
    join_line = lines[1]
    assert join_line.rstrip().endswith("python 'my prog.py' --steps 3"), lines
    url = join_line.split("--join ")[1].split()[0]
    assert not url.startswith("tcp://0.0.0.0") and "listens on every interface" in lines[3], lines


def test_join_without_token_is_refused():
    result = run("--join", "tcp://127.0.0.1:1", "--job", "j", "--size", "2", PY, "-c", "pass", env={k: v for k, v in os.environ.items() if k != "FMPI_TOKEN"})
    assert result.returncode == 2 and "set FMPI_TOKEN" in result.stderr


CORES = len(os.sched_getaffinity(0))


def test_local_ranks_share_the_cores_among_blas_threads():
    code = "import os; from mpi4py import MPI; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])"
    expected = str(max(1, CORES // 4))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    assert run("-n", "4", PY, "-c", code, env=env).stdout.split() == [expected, expected] * 4
    env["OMP_NUM_THREADS"] = "3"  # what the user set wins
    assert run("-n", "2", PY, "-c", code, env=env).stdout.split() == [str(max(1, CORES // 2)), "3"] * 2


def test_ranks_yield_their_core_in_waits_when_they_outnumber_the_cores():
    code = (
        "import os; from mpi4py import MPI; "
        "print(os.environ.get('FMPI_SPIN_US', '-') + '/' + os.environ.get('FMPI_SPIN_YIELD', '-'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FMPI_SPIN_US", "FMPI_SPIN_YIELD")}
    assert run("-n", str(CORES + 1), PY, "-c", code, env=env).stdout.split() == ["1000/1"] * (CORES + 1)
    assert run("-n", str(CORES), PY, "-c", code, env=env).stdout.split() == ["-/-"] * CORES  # the default spin
    env["FMPI_SPIN_US"] = "7"  # what the user set wins
    env["FMPI_SPIN_YIELD"] = "0"
    assert run("-n", str(CORES + 1), PY, "-c", code, env=env).stdout.split() == ["7/0"] * (CORES + 1)


def test_fmpi_timeout_turns_a_deadlock_into_a_diagnosis(program):
    prog = program(
        """
        import time
        from mpi4py import MPI
        c = MPI.COMM_WORLD
        c.Barrier()
        if c.rank == 0:
            c.recv(source=1, tag=7)  # rank 1 never sends
        elif c.rank == 1:
            c.Barrier()  # rank 0 never arrives
        else:
            time.sleep(60)  # computing
        """
    )
    start = time.monotonic()
    result = run("-n", "3", PY, str(prog), timeout=60, env=dict(os.environ, FMPI_TIMEOUT="2"))
    assert result.returncode != 0
    assert time.monotonic() - start < 30
    err = result.stderr
    assert "rank 0: FMPI_TIMEOUT: waited 2 s in a receive from rank 1 (tag 7) on MPI_COMM_WORLD" in err, err
    assert "did not complete within FMPI_TIMEOUT=2 s" in err
    # The others, asked through the relay, say where they are:
    assert "in a collective on MPI_COMM_WORLD (waiting for rank 0)" in err, err
    assert "rank 2 (asked by rank" in err and "not in a blocking MPI call" in err, err


@pytest.mark.parametrize("relay", ["fmpi-relay", "redis"])
def test_fmpi_timeout_covers_collectives_the_relay_runs(program, request, relay):
    # Under --channel relay the barrier is one call to the relay (DSO objects,
    # or a Redis script): that wait too ends at FMPI_TIMEOUT, and says where.
    prog = program(
        """
        import time
        from mpi4py import MPI
        c = MPI.COMM_WORLD
        c.Barrier()
        if c.rank == 0:
            time.sleep(60)  # never arrives at the second barrier
        else:
            c.Barrier()
        """
    )
    extra = ["--relay", request.getfixturevalue("redis_server")[0]] if relay == "redis" else []
    start = time.monotonic()
    result = run("-n", "3", "--channel", "relay", *extra, PY, str(prog), timeout=60, env=dict(os.environ, FMPI_TIMEOUT="2"))
    assert result.returncode != 0
    assert time.monotonic() - start < 30
    err = result.stderr
    assert "FMPI_TIMEOUT: waited 2 s in a server-side barrier on MPI_COMM_WORLD" in err, err
    assert "a server-side barrier on MPI_COMM_WORLD did not complete within FMPI_TIMEOUT=2 s" in err, err
    assert "rank 0 (asked by rank" in err and "not in a blocking MPI call" in err, err


@pytest.mark.parametrize("sigint", [_sigint_default, _sigint_ignored], ids=["foreground", "background-job"])
def test_a_reader_that_goes_away_stops_the_job_quietly(program, tmp_path, sigint):
    # `fmpirun ... | head -1`: once head exits, fmpirun stops the ranks and ends, without a traceback,
    # also when started as a script's background job (SIGINT ignored: its own stop must still work).
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = program(
        f"""
        import os, time
        from mpi4py import MPI
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        while True:
            print("line", MPI.COMM_WORLD.rank, flush=True)
            time.sleep(0.001)
        """
    )
    head = subprocess.Popen(["head", "-n", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc = subprocess.Popen(
        fmpirun_argv("-n", "2", PY, str(prog)), stdout=head.stdin, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=sigint,
    )
    head.stdin.close()
    try:
        assert head.stdout.read().startswith(b"line")
        head.wait(10)
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err
        assert not pids_alive(int(p.name) for p in pids.iterdir())
    finally:
        if proc.poll() is None:  # (it did not end: take it and its ranks down, then fail)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_bad_fmpi_variables_are_refused_once_by_fmpirun():
    result = run("-n", "2", PY, "-c", "pass", env=dict(os.environ, FMPI_CHANNEL="bogus"))
    assert result.returncode == 2
    assert "FMPI_CHANNEL must be one of auto, direct, punch, relay, not 'bogus'" in result.stderr
    assert "rank" not in result.stderr  # no rank started
    result = run("-n", "2", PY, "-c", "pass", env=dict(os.environ, FMPI_SPIN_US="soon"))
    assert result.returncode == 2
    assert "FMPI_SPIN_US must be a number of microseconds, not 'soon'" in result.stderr
    result = run("-n", "2", PY, "-c", "pass", env=dict(os.environ, FMPI_SHM="yes"))
    assert result.returncode == 2
    assert "FMPI_SHM must be 0 (no shared-memory lanes) or 1, not 'yes'" in result.stderr


LARGE_RING = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
data = np.arange(200_000, dtype=np.float64) + comm.rank
out = np.empty_like(data)
comm.Sendrecv(data, (comm.rank + 1) % comm.size, recvbuf=out, source=(comm.rank - 1) % comm.size)
assert np.array_equal(out, np.arange(200_000, dtype=np.float64) + (comm.rank - 1) % comm.size)
print("ok")
"""


@pytest.mark.parametrize("shm, summary", [("1", "; 3 with shared memory;"), ("0", None)])
def test_local_ranks_move_large_payloads_through_shared_memory_unless_told_not_to(shm, summary):
    before = {f for f in os.listdir("/dev/shm") if f.startswith("fmpi-lane-")}
    result = run("-n", "3", "-v", PY, "-c", LARGE_RING, env=dict(os.environ, FMPI_SHM=shm))  # (-v: the links line)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok"] * 3
    line = next(line for line in result.stderr.splitlines() if line.startswith("fmpirun: links: 3 "))
    if summary:
        assert summary in line, line
    else:
        assert "shared memory" not in line, line
    assert {f for f in os.listdir("/dev/shm") if f.startswith("fmpi-lane-")} == before  # nothing left behind


# Each rank prints its rank and, for every thread it runs (main, progress, ...), that thread's CPUs.
_AFFINITY = (
    "import os; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); "
    "cpus = {','.join(map(str, sorted(os.sched_getaffinity(int(t))))) for t in os.listdir('/proc/self/task')}; "
    "print(MPI.COMM_WORLD.rank, *sorted(cpus))"
)


def _affinities(*args: str) -> dict[int, list[str]]:
    result = run(*args, PY, "-c", _AFFINITY)
    assert result.returncode == 0, result.stderr
    lines = [line.split(" ", 1) for line in result.stdout.splitlines()]
    return {int(rank): cpus.split() for rank, cpus in lines}


def test_bound_ranks_run_every_thread_on_one_core_spread_in_blocks():
    allowed = sorted(os.sched_getaffinity(0))
    n = 2 * len(allowed)
    expected = {r: [str(allowed[r * len(allowed) // n])] for r in range(n)}
    assert _affinities("--bind-to", "core", "-n", str(n)) == expected
    assert _affinities("-n", str(n)) == expected  # auto: twice as many ranks as cores
    whole = ",".join(map(str, allowed))
    assert _affinities("--bind-to", "none", "-n", str(n)) == {r: [whole] for r in range(n)}


def test_auto_binding_leaves_uneven_and_undersubscribed_jobs_alone():
    from fmpi.launcher.local import rank_cores

    assert rank_cores(4, "auto", {0, 1}) == [{0}, {0}, {1}, {1}]
    assert rank_cores(3, "auto", {0, 1}) == [None] * 3  # 2 + 1 per core: the scheduler balances better
    assert rank_cores(2, "auto", {0, 1}) == [None] * 2
    assert rank_cores(3, "core", {4, 6}) == [{4}, {4}, {6}]
    assert rank_cores(4, "none", {0, 1}) == [None] * 4


def test_bind_to_is_refused_for_lambda_ranks():
    result = run("--backend", "lambda", "--bind-to", "core", "-n", "2", PY, "-c", "pass")
    assert result.returncode == 2 and "--bind-to works with the local backend only" in result.stderr
