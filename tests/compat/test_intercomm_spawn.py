"""Intercommunicators and Spawn against MPICH: the same programs under fmpirun and mpiexec print the same.

Programs: tests/collectives/programs/diff_intercomm.py (p2p to remote ranks,
every collective, Merge/Dup/Split/Create/Create_from_groups) and
tests/compat/programs/spawn_workers.py (Spawn, Spawn_multiple, Get_parent,
Merge and Disconnect across the parents/children intercommunicator).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests_support import written_lines

HERE = Path(__file__).resolve().parent
INTERCOMM = HERE.parent / "collectives" / "programs" / "diff_intercomm.py"
SPAWN = HERE / "programs" / "spawn_workers.py"
SPAWN_ARGUMENTS = HERE / "programs" / "spawn_arguments.py"



def _both(fmpi, mpich, tmp_path: Path, n: int, program: Path) -> tuple[list[str], list[str]]:
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    a = fmpi(n, program, str(ours))
    assert a.returncode == 0, a.stderr[-3000:]
    b = mpich(n, program, str(ref))
    assert b.returncode == 0, b.stderr[-3000:]
    return written_lines(ours), written_lines(ref)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_intercomm_p2p_collectives_and_construction_as_mpich(fmpi, mpich, tmp_path, n):
    ours, ref = _both(fmpi, mpich, tmp_path, n, INTERCOMM)
    assert ours == ref
    assert len(ours) >= 35 * n


def test_spawn_get_parent_merge_disconnect_as_mpich(fmpi, mpich, tmp_path):
    ours, ref = _both(fmpi, mpich, tmp_path, 2, SPAWN)
    assert ours == ref
    # 2 parents (8 lines each), 3 + 2 children (4 each)
    assert {line.split()[0] for line in ours} == {"parent", "child-single", "child-a", "child-b"}
    assert len(ours) == 2 * 8 + 3 * 4 + 2 * 4


@pytest.mark.parametrize("n", [1, 2])
def test_spawn_reads_the_roots_arguments_alone_as_mpich(fmpi, mpich, tmp_path, n):
    ours, ref = _both(fmpi, mpich, tmp_path, n, SPAWN_ARGUMENTS)
    assert ours == ref
    assert f"errcodes multiple {n - 1} 3 [[0, 0], [0]]" in ours and ours.count("refused ValueError") == 3


def test_arguments_the_root_refuses_end_the_spawn_on_every_rank(fmpi, program):
    script = program(
        """
        import sys
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        try:  # a list of maxprocs one short: mpi4py's ValueError at the root; under MPICH the others would wait
            world.Spawn_multiple([sys.executable] * 2, None, [1] if world.rank == 0 else -1)
        except ValueError as exc:
            print("root", world.rank, exc, flush=True)
        except MPI.Exception as exc:
            print("other", world.rank, exc.Get_error_class() == MPI.ERR_SPAWN, flush=True)
        world.Barrier()
        """
    )
    run = fmpi(3, script, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.sorted_lines() == ["other 1 True", "other 2 True", "root 0 expecting 2 items, got 1"]


def test_spawn_of_a_missing_program_is_one_mpi_error_on_every_parent(fmpi, program):
    script = program(
        """
        from mpi4py import MPI
        try:
            MPI.COMM_WORLD.Spawn("/nonexistent/fmpi-test-binary", [], maxprocs=2)
        except MPI.Exception as exc:
            print("refused", MPI.COMM_WORLD.rank, exc.Get_error_class() == MPI.ERR_SPAWN, flush=True)
        """
    )
    run = fmpi(2, script, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.sorted_lines() == ["refused 0 True", "refused 1 True"]


def test_a_spawned_process_that_fails_ends_the_parents_job(fmpi, program):
    script = program(
        """
        import sys
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        if parent == MPI.COMM_NULL:
            children = MPI.COMM_WORLD.Spawn(sys.executable, [__file__], maxprocs=2)
            children.recv(source=0)  # never sent: the child fails first
        else:
            if MPI.COMM_WORLD.rank == 0:
                raise SystemExit("child gives up")
            parent.Barrier()
        """
    )
    run = fmpi(2, script, timeout=90)
    assert run.returncode != 0
