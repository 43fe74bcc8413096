"""The names libraries probe for (issue 26): each checked under fmpirun against real mpi4py + MPICH.

One program exercises them and prints what it sees; it must print the same under
``fmpirun`` as under ``mpiexec``. What only fmpi can say (the vendor) is checked apart.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

NAMES = r"""
import json, pickle, sys
import mpi4py
from mpi4py import MPI
import mpi4py.rc, mpi4py.run, mpi4py.futures          # mpi4py's pure-Python modules import
from mpi4py.util import pkl5, pool                     # against the MPI in use
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = []
name, version = MPI.get_vendor()
out.append(("vendor", isinstance(name, str) and len(version) == 3))
out.append(("tag_ub", comm.Get_attr(MPI.TAG_UB) >= 32767, "appnum", comm.Get_attr(MPI.APPNUM) in (0, None)))
MPI.Pcontrol(1)

# MPI.pickle: a program's own serializer is used by every object call, on every rank.
MPI.pickle.__init__(lambda o: json.dumps(o).encode(), lambda b: ["json", json.loads(bytes(b))])
out.append(("bcast-json", comm.bcast({"k": rank} if rank == 0 else None, root=0)))
MPI.pickle.__init__()
out.append(("bcast-default", comm.bcast((1, 2) if rank == 0 else None, root=0)))
out.append(("pickle-proto", MPI.pickle.PROTOCOL, MPI.pickle.loads(MPI.pickle.dumps([1, "a"]))))
# Pickle's PROTOCOL/THRESHOLD setters and dumps_oob (what mpi4py.util.pkl5 calls): buffers from THRESHOLD
# bytes leave the stream as MPI.buffer on the array's memory, whatever PROTOCOL says.
pk = MPI.Pickle(protocol=-1)
seen = [pk.PROTOCOL, MPI.Pickle(protocol=3).PROTOCOL, MPI.Pickle(lambda o: b"", None).PROTOCOL]
for protocol, threshold in ((None, None), (2, 64), (-2, 0), (5, 256)):
    pk.PROTOCOL, pk.THRESHOLD = protocol, threshold
    arr = np.arange(32, dtype="i")
    data, bufs = pk.dumps_oob(arr)
    seen.append((pk.PROTOCOL, pk.THRESHOLD, data[:2], [(type(b).__name__, b.nbytes, b.obj is arr) for b in bufs],
                 pk.loads_oob(data, bufs).tolist() == arr.tolist()))
out.append(("pickle-oob", seen))

# Info: dict-like, handles compare by identity, INFO_NULL/INFO_ENV unpickle to themselves.
info = MPI.Info.Create({"a": "1"})
info["b"] = "2"
dup = info.Dup()
out.append(("info", info.items(), info.Get("a"), info.Get("zz"), info.Get_nkeys(), dup == info, len(dup)))
info.Free()
hw = MPI.Get_hw_resource_info()  # (MPI 4.1: a new Info the caller frees)
out.append(("hw-resource-info", type(hw) is MPI.Info, hw.Get_nkeys(), hw != MPI.INFO_NULL))
hw.Free()
out.append(("info-freed", info == MPI.INFO_NULL, bool(MPI.INFO_NULL), bool(MPI.INFO_ENV),
            pickle.loads(pickle.dumps(MPI.INFO_NULL)) is MPI.INFO_NULL))
try:
    MPI.INFO_NULL.Get("a")
except MPI.Exception:
    out.append(("info-null-get", "MPI.Exception"))

mem = MPI.Alloc_mem(64)
out.append(("alloc", len(mem)))
MPI.Free_mem(mem)
out.append(("fromcode", [MPI.Datatype.fromcode(c).Get_size() for c in ("i", "d", "f", "b", "q")],
            MPI.Datatype.fromcode("d") == MPI.DOUBLE))
out.append(("aliases", MPI.SINT32_T == MPI.INT32_T, MPI.SIGNED_LONG == MPI.LONG, MPI.FLOAT16_T.Get_size(),
            MPI.COMPLEX16.Get_size(), MPI.LOGICAL1 == MPI.DATATYPE_NULL))

# None is an empty message, in p2p and collectives.
comm.Sendrecv([None, MPI.INT], (rank + 1) % size, recvbuf=[None, MPI.INT], source=(rank - 1) % size)
comm.Gather([None, MPI.INT], [None, MPI.INT] if rank == 0 else None, root=0)
out.append(("none-buffers", "ok"))

# A communicator handle of one's own class on COMM_WORLD (mpi4py's reductions demo, pkl5).
class MyComm(MPI.Intracomm):
    def twice(self):
        return 2 * self.allreduce(1)
mine = MyComm(comm)
out.append(("subclass", type(mine).__name__, mine == comm, mine.Get_rank() == rank, mine.twice()))

# Objects sent as raw bytes: an empty message is None, MPI.pickle.dumps bytes a plain pickle.
req = comm.Isend([None, 0, MPI.BYTE], (rank + 1) % size)
empty = comm.recv(None, (rank - 1) % size)
req.Wait()
req = comm.Isend(MPI.pickle.dumps({"n": rank, "a": np.arange(70000) + rank}), (rank + 1) % size)
raw = comm.recv(None, (rank - 1) % size)
req.Wait()
out.append(("raw-objects", empty, raw["n"] == (rank - 1) % size, int(raw["a"][0]) == (rank - 1) % size))

# Communicator handles: pickling (predefined ones by name only), Idup, info hints, topology kind.
dup, request = comm.Idup()
request.Wait()
try:
    pickle.dumps(dup)
    refused = False
except ValueError:
    refused = True
comm.Set_info(MPI.Info.Create({"no_locks": "true"}))
out.append(("handles", pickle.loads(pickle.dumps(comm)) is comm, pickle.loads(pickle.dumps(MPI.Intracomm(comm))) == comm,
            refused, dup.Get_size() == size, dup.allreduce(1), comm.Get_topology() == MPI.UNDEFINED,
            isinstance(comm.Get_info(), MPI.Info)))
dup.Free()

# Matched probe, and mpi4py.util.pkl5 on top of it.
comm.send({"from": rank}, dest=(rank + 1) % size, tag=7)
status = MPI.Status()
msg = comm.mprobe(source=MPI.ANY_SOURCE, tag=7, status=status)
out.append(("mprobe", status.Get_source() == (rank - 1) % size, msg.recv()))
comm.Send(np.arange(4, dtype="i") + rank, dest=(rank + 1) % size, tag=8)
m = comm.Mprobe(source=(rank - 1) % size, tag=8, status=status)
buf = np.zeros(status.Get_count(MPI.INT), dtype="i")
m.Recv(buf)
out.append(("Mprobe", buf.tolist(), bool(m), comm.improbe(tag=99) is None))
p5 = pkl5.Intracomm(comm)
big = np.arange(100000) + rank
got = p5.sendrecv(big, dest=(rank + 1) % size, source=(rank - 1) % size)
out.append(("pkl5", int(got.sum()), p5.allgather(rank), p5.bcast("x" * rank, root=size - 1)))
everyone = comm.gather(out, root=0)  # one printer: ranks' lines may interleave mid-line under mpiexec
if rank == 0:
    for r, lines in enumerate(everyone):
        for line in lines:
            print(r, repr(line))
"""


def test_names_behave_as_under_mpich(program, fmpi, mpich):
    path = program(NAMES)
    mine = fmpi(3, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(3, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert len(mine.lines()) == 3 * 20


def test_vendor_is_fmpi(program, fmpi):
    mine = fmpi(1, program("from mpi4py import MPI\nprint(MPI.get_vendor())\nimport mpi4py.util.pkl5 as m\nprint(m.__name__)"))
    assert mine.returncode == 0, mine.stderr[-2000:]
    from fmpi import __version__

    assert mine.lines() == [f"('fmpi', {tuple(int(x) for x in __version__.split('.')[:3])})", "mpi4py.util.pkl5"]
