"""2-D Jacobi heat stencil on a Cartesian process grid, with halo exchange by Sendrecv (bulk-synchronous, p2p heavy).

Demonstrates: domain decomposition of a structured grid. The ranks form a px x py grid (computed here,
like MPI_Dims_create, so no Cartesian-topology support is needed); each owns a block of the plate plus
a one-cell halo. Every iteration it swaps edges with its four neighbours (Sendrecv, with PROC_NULL on
the plate's border) and applies the 5-point Jacobi update.
Calls: Sendrecv (4 per iteration: north/south rows, west/east columns), Allreduce MAX (largest change,
every --check iterations and at the end), Allreduce SUM (int64 fixed-point heat total), gather (--save).

The plate's top edge is held at 1.0 and its other edges at 0.0. The update is elementwise, so every cell
is bit-identical to a serial run, and the printed result is identical for any N and under mpiexec or
fmpirun (the total is summed in fixed point, the maximum is exact).

    mpiexec -n 4 python apps/jacobi.py --nx 1024 --ny 1024 --iterations 500
    fmpirun -n 4 python apps/jacobi.py --nx 1024 --ny 1024 --iterations 500
"""

import argparse
import math

import numpy as np
from mpi4py import MPI

from fmpi import checkpoint

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--nx", type=int, default=512, help="interior cells along x (columns)")
parser.add_argument("--ny", type=int, default=512, help="interior cells along y (rows)")
parser.add_argument("--iterations", type=int, default=500, help="maximum Jacobi sweeps")
parser.add_argument("--tol", type=float, default=0.0, help="stop once the largest change of a sweep is below this")
parser.add_argument("--check", type=int, default=10, help="sweeps between convergence checks (with --tol)")
parser.add_argument("--save", help="rank 0 gathers the whole plate (with its border) into this .npy file")
args = parser.parse_args()


def grid_dims(n: int) -> tuple[int, int]:
    """The most square factorization px * py = n with px >= py (what MPI_Dims_create(n, 2) returns)."""
    py = math.isqrt(n)
    while n % py:
        py -= 1
    return n // py, py


def block(total: int, parts: int, index: int) -> tuple[int, int]:
    """(first, count) of the index-th of `parts` near-equal blocks of `total` cells."""
    base, extra = divmod(total, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


# Process grid: rank = row * px + col, row 0 at the top of the plate.
px, py = grid_dims(comm.size)
if args.nx < px or args.ny < py:
    parser.error(f"the plate ({args.nx} x {args.ny}) is smaller than the process grid ({px} x {py})")
row, col = divmod(comm.rank, px)
north = comm.rank - px if row > 0 else MPI.PROC_NULL
south = comm.rank + px if row < py - 1 else MPI.PROC_NULL
west = comm.rank - 1 if col > 0 else MPI.PROC_NULL
east = comm.rank + 1 if col < px - 1 else MPI.PROC_NULL
y0, ny = block(args.ny, py, row)
x0, nx = block(args.nx, px, col)

# Local block with a one-cell halo; on the plate's border the halo holds the fixed boundary values.
u = np.zeros((ny + 2, nx + 2))
if north == MPI.PROC_NULL:
    u[0, :] = 1.0
# Past one launch's time limit: continue from the newest checkpoint (fmpi.checkpoint; a no-op outside
# fmpirun --max-runtime), with a result identical to an uninterrupted run.
u, sweeps = checkpoint.restore(u, 0)
new = u.copy()
send_col, recv_col = np.empty(ny), np.empty(ny)

# Tags name the direction a message travels, so a rank matches each edge with the right neighbour.
SOUTHWARD, NORTHWARD, EASTWARD, WESTWARD = 1, 2, 3, 4


def exchange_halo(a: np.ndarray) -> None:
    # Rows are contiguous: send and receive in place.
    comm.Sendrecv(a[ny, 1:-1], dest=south, sendtag=SOUTHWARD, recvbuf=a[0, 1:-1], source=north, recvtag=SOUTHWARD)
    comm.Sendrecv(a[1, 1:-1], dest=north, sendtag=NORTHWARD, recvbuf=a[ny + 1, 1:-1], source=south, recvtag=NORTHWARD)
    # Columns are strided: pack and unpack (a receive from PROC_NULL leaves the border untouched).
    send_col[:] = a[1:-1, nx]
    comm.Sendrecv(send_col, dest=east, sendtag=EASTWARD, recvbuf=recv_col, source=west, recvtag=EASTWARD)
    if west != MPI.PROC_NULL:
        a[1:-1, 0] = recv_col
    send_col[:] = a[1:-1, 1]
    comm.Sendrecv(send_col, dest=west, sendtag=WESTWARD, recvbuf=recv_col, source=east, recvtag=WESTWARD)
    if east != MPI.PROC_NULL:
        a[1:-1, nx + 1] = recv_col


delta = np.zeros(1)
t0 = MPI.Wtime()
while sweeps < args.iterations:
    exchange_halo(u)
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    u, new = new, u  # `new` keeps the border values, which never change
    sweeps += 1
    if args.tol > 0 and (sweeps % args.check == 0 or sweeps == args.iterations):
        delta[0] = np.abs(u[1:-1, 1:-1] - new[1:-1, 1:-1]).max(initial=0.0)
        comm.Allreduce(MPI.IN_PLACE, delta, op=MPI.MAX)
        if delta[0] < args.tol:
            break
    checkpoint.save(u, sweeps)
elapsed = MPI.Wtime() - t0

delta[0] = np.abs(u[1:-1, 1:-1] - new[1:-1, 1:-1]).max(initial=0.0) if sweeps else 0.0
comm.Allreduce(MPI.IN_PLACE, delta, op=MPI.MAX)
# Total heat in fixed point (units of 2**-32; cells are in [0, 1]): an exact, order-independent sum.
heat = np.array([np.rint(u[1:-1, 1:-1] * 2.0**32).astype(np.int64).sum()], dtype=np.int64)
comm.Allreduce(MPI.IN_PLACE, heat, op=MPI.SUM)

blocks = comm.gather((y0, x0, u[1:-1, 1:-1]) if args.save else None, root=0)
if comm.rank == 0:
    print(
        f"jacobi nx={args.nx} ny={args.ny} sweeps={sweeps} heat={heat[0]} "
        f"mean={heat[0] / 2.0**32 / (args.nx * args.ny):.12f} lastchange={delta[0]:.17g}"
    )
    print(f"time {elapsed:.3f} s for {sweeps} sweeps on a {px} x {py} process grid")
    if args.save:
        plate = np.zeros((args.ny + 2, args.nx + 2))
        plate[0, :] = 1.0
        for by, bx, b in blocks:
            plate[1 + by : 1 + by + b.shape[0], 1 + bx : 1 + bx + b.shape[1]] = b
        np.save(args.save, plate)
