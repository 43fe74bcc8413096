"""fmpirun forwards its standard input to rank 0, as mpiexec does (issue 26); --stdin picks others."""

import os
import subprocess
import sys
import textwrap

import pytest
from tests_support import fmpirun_argv

BIN = os.path.dirname(sys.executable)

# In the manner of mpi4py's compute-pi demo: rank 0 reads interval counts until 0.
CPI = textwrap.dedent("""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    while True:
        n = None
        if comm.rank == 0:
            try:
                n = int(input("intervals (0 quits): "))
            except EOFError:
                n = -1
        n = comm.bcast(n, root=0)
        if n <= 0:
            break
        h = 1.0 / n
        part = sum(4.0 / (1.0 + (h * (i - 0.5)) ** 2) for i in range(comm.rank + 1, n + 1, comm.size)) * h
        pi = comm.reduce(part, op=MPI.SUM, root=0)
        if comm.rank == 0:
            print(f"n={n} pi~{pi:.12f}")
    if comm.rank == 0:
        print("bye" if n == 0 else "EOF")
""")

WHO = "from mpi4py import MPI\nimport sys\nprint(MPI.COMM_WORLD.rank, repr(sys.stdin.read()))\n"


def _run(argv, text, env=None):
    return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_rank0_reads_stdin_like_mpiexec(tmp_path):
    prog = tmp_path / "cpi.py"
    prog.write_text(CPI)
    mine = _run(fmpirun_argv("-n", "3", sys.executable, str(prog)), "10\n1000\n0\n")
    assert mine.returncode == 0, mine.stderr[-2000:]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    ref = _run([os.path.join(BIN, "mpiexec"), "-n", "3", sys.executable, str(prog)], "10\n1000\n0\n", env)
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert mine.stdout == ref.stdout
    assert mine.stdout.rstrip().endswith("bye") and "n=1000 pi~3.14159" in mine.stdout


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ((), ["0 'in\\n'", "1 ''", "2 ''"]),
        (("--stdin", "2"), ["0 ''", "1 ''", "2 'in\\n'"]),
        (("--stdin", "none"), ["0 ''", "1 ''", "2 ''"]),
        (("--stdin", "all"), ["0 'in\\n'", "1 'in\\n'", "2 'in\\n'"]),
    ],
)
def test_stdin_option(tmp_path, option, expected):
    prog = tmp_path / "who.py"
    prog.write_text(WHO)
    run = _run(fmpirun_argv("-n", "3", *option, sys.executable, str(prog)), "in\n")
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(run.stdout.splitlines()) == expected


@pytest.mark.parametrize("spec", ["3", "-1", "first"])
def test_bad_stdin_rank_is_one_clear_error(spec):
    run = _run(fmpirun_argv("-n", "3", "--stdin", spec, sys.executable, "-c", "pass"), "")
    assert run.returncode != 0
    assert "--stdin" in run.stderr and "Traceback" not in run.stderr
