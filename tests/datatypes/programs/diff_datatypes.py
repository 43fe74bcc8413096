"""Differential: derived datatypes (every constructor) in p2p, persistent requests and collectives;
their bounds and contents; Pack/Unpack. One file of result lines per rank."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, value):
    if isinstance(value, np.ndarray):
        value = value.tolist()
    print(f"{rank} {name} {value!r}", file=_out)


def describe(name, t):
    contents = t.Get_contents() if not t.is_named else None
    out(f"{name}-bounds", [t.size, *t.Get_extent(), *t.Get_true_extent(), *t.Get_envelope()])
    if contents:
        out(f"{name}-contents", [contents[0], contents[1], contents[2]])


D = MPI.DOUBLE
types = {
    "contiguous": D.Create_contiguous(3),
    "vector": D.Create_vector(3, 2, 4),
    "vector-neg": D.Create_vector(2, 1, -3),
    "hvector": D.Create_hvector(2, 3, 40),
    "indexed": D.Create_indexed([1, 2, 3], [0, 3, 7]),
    "hindexed": D.Create_hindexed([2, 1], [8, 48]),
    "indexed_block": D.Create_indexed_block(2, [1, 5, 9]),
    "hindexed_block": D.Create_hindexed_block(1, [0, 16, 72]),
    "subarray-C": D.Create_subarray([4, 5], [2, 3], [1, 1]),
    "subarray-F": D.Create_subarray([4, 5], [2, 3], [1, 2], order=MPI.ORDER_F),
    "darray-block": D.Create_darray(4, 1, [6, 8], [MPI.DISTRIBUTE_BLOCK] * 2, [MPI.DISTRIBUTE_DFLT_DARG] * 2, [2, 2]),
    "darray-cyclic": D.Create_darray(4, 2, [7, 5], [MPI.DISTRIBUTE_CYCLIC] * 2, [2, MPI.DISTRIBUTE_DFLT_DARG], [2, 2]),
    "resized": D.Create_resized(-8, 32),
    "resized-contig": D.Create_resized(0, 24).Create_contiguous(2),
    "struct-same": MPI.Datatype.Create_struct([1, 2], [0, 16], [D, D]),
    "dup": D.Create_vector(2, 1, 3).Dup(),
}
for name, t in types.items():
    describe(name, t.Commit())
for name, t in {"struct-pad": MPI.Datatype.Create_struct([1, 1], [0, 8], [D, MPI.INT]),
                "struct-mixed": MPI.Datatype.Create_struct([1, 1, 2], [0, 4, 8], [MPI.INT, MPI.FLOAT, D])}.items():
    describe(name, t)

# p2p: send 2 elements of each type from a ring neighbour into zeros; persistent requests too
for name, t in types.items():
    if t.lb < 0 or t.true_lb < 0:
        continue
    span = t.true_ub + t.extent
    src = np.arange(span // 8 + 8, dtype="d") + 1000 * rank
    dst = np.zeros_like(src)
    comm.Sendrecv([src, 2, t], (rank + 1) % size, 7, [dst, 2, t], (rank - 1) % size, 7)
    out(f"sendrecv-{name}", dst)
    dst[:] = 0
    recv = comm.Recv_init([dst, 2, t], (rank - 1) % size, 8)
    send = comm.Send_init([src, 2, t], (rank + 1) % size, 8)
    MPI.Prequest.Startall([recv, send])
    status = MPI.Status()
    MPI.Request.Waitall([recv, send], [status, MPI.Status()])
    out(f"persistent-{name}", [dst.tolist(), status.Get_count(t), status.Get_count(MPI.DOUBLE)])

# a struct of mixed types (int, float, double, double) through p2p and Bcast
rec = np.dtype([("i", "i4"), ("f", "f4"), ("d", "f8", 2)])
st = MPI.Datatype.Create_struct([1, 1, 2], [0, 4, 8], [MPI.INT, MPI.FLOAT, D]).Commit()
recs = np.zeros(3, rec)
if rank == 0:
    recs["i"], recs["f"], recs["d"] = [1, 2, 3], [0.5, 1.5, 2.5], [[1, 2], [3, 4], [5, 6]]
comm.Bcast([recs, 3, st], root=0)
out("bcast-struct", [recs["i"].tolist(), recs["f"].tolist(), recs["d"].ravel().tolist()])

# collectives with a column type (a vector resized to one element's extent)
n = 4
col = D.Create_vector(n, 1, size).Create_resized(0, 8).Commit()
mine = np.arange(n, dtype="d") + 10 * rank
grid = np.zeros((n, size))
comm.Allgather([mine, n, D], [grid, 1, col])
out("allgather-col", grid)
grid2 = np.zeros((n, size))
comm.Gather([mine, n, D], [grid2, 1, col] if rank == 0 else None, root=0)
out("gather-col", grid2)
back = np.zeros(n)
comm.Scatter([grid, 1, col] if rank == 0 else None, [back, n, D], root=0)
out("scatter-col", back)
grid3 = np.zeros((n, size))
comm.Gatherv([mine, n, D], [grid3, [1] * size, list(range(size)), col] if rank == 0 else None, root=0)
out("gatherv-col", grid3)
full = np.arange(n * size, dtype="d").reshape(n, size) + 100 * rank
mixed = np.zeros((n, size))
comm.Alltoall([full, 1, col], [mixed, 1, col])
out("alltoall-col", mixed)
vec = D.Create_vector(2, 1, 2).Commit()
b = np.arange(4.0) * (rank + 1) if rank == 0 else np.zeros(4)
comm.Bcast([b, 1, vec], root=0)
out("bcast-vector", b)

# Pack / Unpack
v = D.Create_vector(3, 1, 2).Commit()
packed = bytearray(v.Pack_size(2, comm) + 8)
pos = v.Pack(np.arange(12.0), packed, 0, comm)
out("pack", [pos, np.frombuffer(packed[:pos], "d").tolist()])
unpacked = np.zeros(12)
v.Unpack(packed, 0, unpacked, comm)
out("unpack", unpacked)


# persistent collectives, started twice, with a derived datatype in the Bcast
buf = np.arange(4.0) if rank == 0 else np.zeros(4)
bcast = comm.Bcast_init([buf, 1, vec], root=0)
total = np.zeros(3)
allreduce = comm.Allreduce_init(np.full(3, rank + 1.0), total)
for round_ in range(2):
    MPI.Prequest.Startall([bcast, allreduce])
    MPI.Request.Waitall([bcast, allreduce])
    out(f"persistent-collectives-{round_}", [buf.tolist(), total.tolist()])
    if rank == 0:
        buf += 10
