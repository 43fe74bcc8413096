"""Point-to-point semantics in real fmpirun jobs, differential against real MPICH + mpi4py."""

from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("p2p_semantics.py")


def _results(directory: Path) -> list[str]:
    return sorted(line for f in directory.glob("rank*.txt") for line in f.read_text().splitlines())


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_p2p_semantics_match_mpich(n, fmpi, mpich, tmp_path):
    # 64 MiB at n=2 (the bar for large messages), 1 MiB elsewhere to keep the suite quick.
    nbytes = str(64 << 20 if n == 2 else 1 << 20)
    ours_dir, ref_dir = tmp_path / "fmpi", tmp_path / "mpich"
    ours_dir.mkdir()
    ref_dir.mkdir()
    ours = fmpi(n, PROGRAM, nbytes, str(ours_dir))
    assert ours.returncode == 0, ours.stderr
    reference = mpich(n, PROGRAM, nbytes, str(ref_dir))
    assert reference.returncode == 0, reference.stderr
    assert _results(ours_dir) == _results(ref_dir)
    # Every rank ran every applicable check (guards against a silently shortened run).
    ring = [line for line in _results(ours_dir) if " ring_obj " in line]
    assert len(ring) == n
    if n > 1:
        assert sum(" large " in line for line in _results(ours_dir)) == 2


FINALIZED_PEER = """
import sys, time
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
if comm.rank == 1:
    MPI.Finalize()  # and exits: what a pool's worker does when told to stop
    sys.exit(0)
time.sleep(2)  # rank 1 has finalized by now
comm.send(None, dest=1, tag=0)  # a stop message, as zeus's and schwimmbad-style pools send at exit
comm.Send(np.zeros(4), dest=1, tag=1)
print("sent", flush=True)
if len(sys.argv) > 1:  # above the eager limit: nobody can ever take it, so it fails instead of hanging
    try:
        comm.Send(np.zeros(int(sys.argv[1]), dtype=np.uint8), dest=1, tag=2)
    except MPI.Exception as exc:
        print("large send:", exc.Get_error_class() != MPI.SUCCESS, flush=True)
"""


def test_an_eager_send_to_a_rank_that_finalized_completes_as_under_mpich(fmpi, mpich, program):
    script = program(FINALIZED_PEER)
    reference = mpich(2, script)
    assert reference.returncode == 0 and reference.lines() == ["sent"], reference.stderr
    ours = fmpi(2, script)
    assert ours.returncode == 0 and ours.lines() == ["sent"], ours.stderr


def test_a_rendezvous_send_to_a_rank_that_finalized_fails(fmpi, program):
    ours = fmpi(2, program(FINALIZED_PEER), str(4 << 20))
    assert ours.returncode == 0 and ours.lines() == ["sent", "large send: True"], ours.stderr


NUMBERS_AS_MPI4PY_TAKES_THEM = """
import numpy as np
from mpi4py import MPI

c = MPI.COMM_WORLD
pairs = c.size / 2  # a float, as in mpi4py's osu_multi_lat demo
seen = []
if c.rank < pairs:
    c.send("obj", dest=c.rank + pairs, tag=3.0)
    c.Send(np.arange(2.0), dest=c.rank + pairs + 0.7, tag=np.int64(4))  # truncated, as mpi4py does
else:
    seen.append(c.recv(source=c.rank - pairs, tag=3))
    buf = np.zeros(2)
    c.Recv(buf, source=np.int32(c.rank - pairs), tag=4.9)
    seen += [buf.tolist(), c.Iprobe(source=0.0)]
try:
    c.send(None, dest="1")
except TypeError:
    seen.append("TypeError")
for rank, what in enumerate(c.gather(seen) or []):  # (one printer: mpiexec may interleave lines)
    print(rank, what)
"""


def test_ranks_and_tags_are_taken_as_mpi4py_takes_them(fmpi, mpich, program):
    script = program(NUMBERS_AS_MPI4PY_TAKES_THEM)
    reference = mpich(2, script)
    assert reference.returncode == 0, reference.stderr
    ours = fmpi(2, script)
    assert ours.returncode == 0, ours.stderr
    assert ours.lines() == reference.lines() and len(ours.lines()) == 2
