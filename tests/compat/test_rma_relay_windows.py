"""Windows whose memory lives on the relay (``FMPI_WIN_MEMORY=relay``, Info ``fmpi_memory=relay``; ``api/win_relay.py``):
the differential RMA programs of ``test_rma_windows`` give MPICH's results on them, mpi4py's nxtval-mpi3 demo runs
unchanged, and a passive-target access completes while the target's process is stopped.

These windows follow MPI's separate memory model, so a program must synchronize before it reads RMA updates from its
own memory (MPI-4 §12.7): where ``test_rma_windows``' programs read it after a passive-target epoch and a mere
Barrier (fine on MPICH's unified windows), the versions here lock and unlock the own window first — the portable
idiom, which MPICH runs too.
"""

import os
import sys
from pathlib import Path

import pytest
from test_rma_windows import LOCKED_COUNTER, OPERATIONS

from tests_support import mpi4py_demo

pytestmark = pytest.mark.timeout(300)

RELAY = {**os.environ, "FMPI_WIN_MEMORY": "relay"}
_SYNC = "\nwin.Lock(rank, MPI.LOCK_SHARED); win.Unlock(rank)  # (separate model: the updates into this rank's memory)\n"


def separate(program: str) -> str:
    """``OPERATIONS`` with the synchronizations MPI's separate model needs before a rank reads its own window."""
    out = program.replace('comm.Barrier()\nif rank == 0:\n    print("accumulate"', 'comm.Barrier()' + _SYNC + 'if rank == 0:\n    print("accumulate"')
    out = out.replace('comm.Barrier()\nif rank == 0:\n    print("get_accumulate"', 'comm.Barrier()' + _SYNC + 'if rank == 0:\n    print("get_accumulate"')
    out = out.replace('comm.Barrier()\nif rank == 0:\n    print("after compare_and_swap"',
                      'comm.Barrier()' + _SYNC.replace("win.", "counter.") + 'if rank == 0:\n    print("after compare_and_swap"')
    out = out.replace("win.model == MPI.WIN_UNIFIED", "win.model in (MPI.WIN_UNIFIED, MPI.WIN_SEPARATE)")
    assert out.count("Unlock(rank)") == 3
    return on_relay(out, "counter.Free()", "win, counter")


def on_relay(program: str, before: str, wins: str) -> str:
    """`program`, telling under fmpi only (MPICH prints nothing more) that its windows kept their memory on the relay."""
    check = f'if MPI.__name__.startswith("fmpi"):\n    print("fmpi: relay memory", all(w.model == MPI.WIN_SEPARATE for w in ({wins},)))\n'
    assert before in program
    return program.replace(before, check + before, 1)


def without_relay_check(run, n: int) -> list[str]:
    lines = run.sorted_lines()
    assert lines.count("fmpi: relay memory True") == n, lines
    return [line for line in lines if not line.startswith("fmpi: ")]


@pytest.mark.parametrize("n", [2, 3])
def test_window_operations_on_relay_memory_as_under_mpich(program, fmpi, mpich, n):
    path = program(separate(OPERATIONS))
    mine = fmpi(n, path, env=RELAY)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(n, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert without_relay_check(mine, n) == ref.sorted_lines()
    assert "fetch_and_op draws each ticket once True" in mine.lines()


@pytest.mark.parametrize("n", [2, 3])
def test_exclusive_locks_on_relay_memory_serialize_read_modify_writes(program, fmpi, mpich, n):
    path = program(on_relay(LOCKED_COUNTER, "win.Free()", "win"))
    mine = fmpi(n, path, env=RELAY)
    assert mine.returncode == 0, mine.stderr[-3000:]
    assert without_relay_check(mine, n) == [f"counter [{40 * (n - 1)}, {5 * (n - 1)}]"]
    ref = mpich(n, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert without_relay_check(mine, n) == ref.lines()


@pytest.mark.slow  # (fetches mpi4py's sdist, as the futures demos' tests do)
def test_mpi4pys_nxtval_mpi3_demo_runs_unchanged_on_relay_memory(program, fmpi, mpich):
    """mpi4py's demo/nxtval/nxtval-mpi3.py (a counter and a mutex: Get_accumulate under Lock on rank 0's window)."""
    path = program(mpi4py_demo("demo/nxtval/nxtval-mpi3.py") + '\nprint(MPI.COMM_WORLD.rank, "done", MPI.Win.Allocate(8, comm=MPI.COMM_WORLD).model == MPI.WIN_SEPARATE)\n')
    mine = fmpi(3, path, env=RELAY)
    assert mine.returncode == 0, mine.stderr[-3000:]
    assert mine.sorted_lines() == ["0 done True", "1 done True", "2 done True"]


STOPPED_TARGET = r"""
import os, signal, threading, time
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
info = MPI.Info.Create()
info.Set("fmpi_memory", "relay")
mem = np.zeros(2, dtype="l")
win = MPI.Win.Create(mem, disp_unit=8, info=info, comm=comm)
print(comm.rank, "separate", win.Get_attr(MPI.WIN_MODEL) == MPI.WIN_SEPARATE)
pid = comm.bcast(os.getpid() if comm.rank == 1 else None, root=1)
comm.Barrier()
if comm.rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)        # the target's process does not run at all (rank 0 wakes it)
    win.Lock(1)
    print("target woke with", mem.tolist())
    win.Unlock(1)
else:
    waker = threading.Timer(20, os.kill, (pid, signal.SIGCONT))  # (at the latest: whatever the origin's fate)
    waker.start()
    time.sleep(1)
    start = time.monotonic()
    win.Lock(1)
    win.Put(np.array([42], dtype="l"), 1)
    old = np.zeros(1, dtype="l")
    win.Fetch_and_op(np.array([5], dtype="l"), old, 1, 1, MPI.SUM)
    win.Unlock(1)
    took = time.monotonic() - start
    waker.cancel()
    os.kill(pid, signal.SIGCONT)
    print("origin done", "in under 5 s" if took < 5 else f"in {took:.1f} s", int(old[0]))
comm.Barrier()
win.Free()
"""


def test_passive_target_access_to_a_stopped_process_completes(program, fmpi):
    """The target is stopped (SIGSTOP: no thread of it runs); Lock, Put, Fetch_and_op and Unlock on its relay-hosted
    window complete anyway, and the target sees the values once it runs again and locks its window."""
    run = fmpi(2, program(STOPPED_TARGET), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.sorted_lines() == ["0 separate True", "1 separate True", "origin done in under 5 s 0", "target woke with [42, 5]"]


NO_DSO = r"""
import numpy as np
from mpi4py import MPI

try:
    MPI.Win.Allocate(8, info={"fmpi_memory": "relay"}, comm=MPI.COMM_WORLD)
except MPI.Exception as exc:
    print("refused", exc.Get_error_class() == MPI.ERR_UNSUPPORTED_OPERATION)
win = MPI.Win.Allocate(8, info={"fmpi_memory": "local"}, comm=MPI.COMM_WORLD)
print("local", win.model == MPI.WIN_UNIFIED)
win.Free()
"""


def test_relay_memory_without_an_fmpi_relay_is_refused_at_creation(program, redis_server):
    """With a Redis relay (no shared objects), and outside fmpirun, creation fails with a clear error, never hangs."""
    import subprocess

    from tests_support import fmpirun_argv

    path = program(NO_DSO)
    proc = subprocess.run(fmpirun_argv("-n", "2", "--relay", redis_server[0], sys.executable, str(path)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(proc.stdout.splitlines()) == ["local True"] * 2 + ["refused True"] * 2
    alone = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src" / "fmpi" / "rank" / "shim")})
    assert alone.stdout.splitlines() == ["refused True", "local True"], alone.stderr[-3000:]


OVER_QUOTA = r"""
from mpi4py import MPI

comm = MPI.COMM_WORLD
info = MPI.Info.Create()
info.Set("fmpi_memory", "relay")
try:
    MPI.Win.Allocate((2 << 20) if comm.rank == 0 else 0, info=info, comm=comm)
except MPI.Exception as exc:
    print(comm.rank, "refused", exc.Get_error_class() == (MPI.ERR_NO_MEM if comm.rank == 0 else MPI.ERR_WIN))
win = MPI.Win.Allocate(256 << 10, info=info, comm=comm)  # (the refused window left nothing on the relay)
print(comm.rank, "fits", win.Get_attr(MPI.WIN_SIZE))
win.Free()
"""


def test_relay_memory_is_bounded_by_the_jobs_dso_quota(program, fmpi):
    from tests_support import RelayProcess

    relay = RelayProcess("--dso-job-bytes", "1M")
    try:
        run = fmpi(2, program(OVER_QUOTA), extra=("--relay", relay.url))
    finally:
        relay.stop()
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.sorted_lines() == ["0 fits 262144", "0 refused True", "1 fits 262144", "1 refused True"]
