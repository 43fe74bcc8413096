"""Freed and null handles as in mpi4py (issue 26): a freed communicator or group compares equal to
COMM_NULL / GROUP_NULL and is false, ``MPI.Group()`` is a null group, ``MPI.Group(g)`` another handle,
GROUP_NULL and GROUP_EMPTY pickle to themselves and other groups refuse to; freeing a predefined
communicator or a null handle is an MPI error. Checked against MPICH + mpi4py.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

HANDLES = r"""
import pickle
from mpi4py import MPI

comm = MPI.COMM_WORLD
out = []

def error(fn):
    try:
        fn()
        return "ok"
    except MPI.Exception as e:
        return "MPI.Exception"
    except Exception as e:
        return type(e).__name__

for parent in (MPI.COMM_WORLD, MPI.COMM_SELF):
    dup = parent.Dup()
    other = MPI.Intracomm(dup)
    out.append(("dup", dup == MPI.COMM_NULL, bool(dup), dup.Get_size() == parent.Get_size()))
    dup.Free()
    out.append(("freed", dup == MPI.COMM_NULL, dup != MPI.COMM_NULL, bool(dup)))
    out.append(("free-again", error(dup.Free)))
    split = parent.Split(0, 0)
    split.Free()
    out.append(("split-freed", split == MPI.COMM_NULL))
out.append(("free-world", error(MPI.COMM_WORLD.Free), "free-self", error(MPI.COMM_SELF.Free)))
out.append(("world-alive", comm.allreduce(1) == comm.Get_size()))

group = comm.Get_group()
out.append(("group", bool(group), group == MPI.GROUP_NULL, group.Get_size() == comm.Get_size()))
group.Free()
out.append(("group-freed", bool(group), group == MPI.GROUP_NULL, group == MPI.GROUP_EMPTY, error(group.Free)))
null = MPI.Group()
out.append(("group()", bool(null), null == MPI.GROUP_NULL, null is MPI.GROUP_NULL,
            MPI.GROUP_EMPTY == MPI.GROUP_NULL, bool(MPI.GROUP_EMPTY), error(MPI.GROUP_NULL.Free)))
copy = MPI.Group(MPI.GROUP_EMPTY)
out.append(("group(g)", copy == MPI.GROUP_EMPTY, copy is MPI.GROUP_EMPTY, bool(copy), copy.Get_size()))
out.append(("pickle", pickle.loads(pickle.dumps(MPI.GROUP_NULL)) is MPI.GROUP_NULL,
            pickle.loads(pickle.dumps(MPI.GROUP_EMPTY)) is MPI.GROUP_EMPTY,
            pickle.loads(pickle.dumps(MPI.Group(MPI.GROUP_NULL))) == MPI.GROUP_NULL,
            error(lambda: pickle.dumps(comm.Get_group()))))

def code(fn):
    try:
        fn()
        return "ok"
    except MPI.Exception as e:
        return e.Get_error_class()
    except Exception as e:
        return type(e).__name__

null = MPI.COMM_NULL
out.append(("comm-null", bool(null), null == MPI.Comm(), MPI.Comm() is null, null.Get_name(),
            [code(getattr(null, m)) for m in ("Get_size", "Get_rank", "Is_inter", "Is_intra", "Get_group",
                                              "Get_topology", "Free", "Get_errhandler")],
            code(lambda: null.Get_attr(MPI.TAG_UB)), code(lambda: MPI.Comm.Compare(MPI.COMM_SELF, null)),
            code(lambda: MPI.Intracomm().Dup()), code(lambda: MPI.Intercomm().Get_remote_size()),
            code(lambda: MPI.Comm((1, 2, 3)))))
out.append(("comm-null-pickle", pickle.loads(pickle.dumps(null)) is null,
            pickle.loads(pickle.dumps(MPI.Comm(null))) == null, pickle.loads(pickle.dumps(MPI.Comm(null))) is null))
import sys  # one write: mpiexec interleaves the ranks' output at write boundaries
sys.stdout.write("".join(f"{comm.rank} {item!r}\n" for item in out))
sys.stdout.flush()
"""

SPLIT_TYPE = r"""
from mpi4py import MPI

comm = MPI.COMM_WORLD.Dup()
rank, size = comm.Get_rank(), comm.Get_size()
out = []
for root in range(size):  # one rank asks for its host's ranks, the others for nothing (mpi4py's test_comm)
    split_type = MPI.COMM_TYPE_SHARED if rank == root else MPI.UNDEFINED
    new = comm.Split_type(split_type)
    out.append((root, new == MPI.COMM_NULL, new.Get_size() if new else None))
    if new:
        new.Free()
out.append(("after", comm.allreduce(rank), comm.bcast("in step", root=size - 1)))
import sys
sys.stdout.write("".join(f"{rank} {item!r}\n" for item in out))
sys.stdout.flush()
"""


def test_freed_and_null_handles_behave_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: Free left a communicator alive (!= COMM_NULL, true) and a group too,
    ``MPI.Group()`` was an empty group, groups pickled by value."""
    path = program(HANDLES)
    mine = fmpi(2, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(2, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert len(mine.lines()) == 2 * 17


def test_split_type_with_some_ranks_undefined_behaves_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: ranks passing UNDEFINED skipped the host allgather the others made, so
    the communicator's collectives went out of step (a truncation error, then test_comm's hang at N = 2)."""
    path = program(SPLIT_TYPE)
    mine = fmpi(3, path, timeout=60)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(3, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert len(mine.lines()) == 3 * 4
