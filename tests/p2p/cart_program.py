"""Cartesian topology calls; prints one line per rank (compared between MPICH and fmpi)."""

import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
dims = MPI.Compute_dims(world.size, 2)
cart = world.Create_cart(dims, periods=[True, False])
out = [f"dims {dims}"]
if cart != MPI.COMM_NULL:
    out.append(f"topo {cart.Get_topo()} coords {cart.coords} ndim {cart.ndim}")
    out.append(f"shift0 {cart.Shift(0, 1)} shift1 {cart.Shift(1, 1)} shift1by2 {cart.Shift(1, 2)}")
    out.append(f"cart_rank {[cart.Get_cart_rank(cart.Get_coords(r)) for r in range(cart.size)]}")
    row = cart.Sub([False, True])
    out.append(f"row size {row.size} rank {row.rank} sum {row.allreduce(world.rank)}")
    src, dst = cart.Shift(1, 1)
    got = cart.sendrecv(world.rank, dest=dst, source=src)
    out.append(f"halo {got}")
small = world.Create_cart([1], periods=[False])
out.append(f"small {'null' if small == MPI.COMM_NULL else small.size}")
with open(f"{sys.argv[1]}/rank{world.rank}.txt", "w") as f:
    f.write("\n".join(out) + "\n")
