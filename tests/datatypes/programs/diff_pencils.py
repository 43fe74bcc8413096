"""Differential: mpi4py-fft's pencil transpose — a 3-D array distributed in slabs along axis 0 is
redistributed along axis 1 with Create_subarray + Alltoallw (then back with Ialltoallw)."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")
N = (6, 7, 5)


def split(n):
    """(sizes, starts) of n split over the ranks as evenly as possible."""
    sizes = [n // size + (r < n % size) for r in range(size)]
    return sizes, [sum(sizes[:r]) for r in range(size)]


def subarrays(shape, axis, dtype):
    """One subarray of an array of `shape` per rank: the rank's share along `axis`."""
    sizes, starts = split(shape[axis])
    types = []
    for r in range(size):
        sub, start = list(shape), [0] * len(shape)
        sub[axis], start[axis] = sizes[r], starts[r]
        types.append(dtype.Create_subarray(shape, sub, start).Commit())
    return types


n0, s0 = split(N[0])
n1, s1 = split(N[1])
for dtype, mpitype in ((np.float64, MPI.DOUBLE), (np.complex128, MPI.C_DOUBLE_COMPLEX)):
    x = np.empty((n0[rank], N[1], N[2]), dtype)
    x[...] = (np.arange(s0[rank], s0[rank] + n0[rank])[:, None, None] * 100
              + np.arange(N[1])[None, :, None] * 10 + np.arange(N[2])[None, None, :])
    if dtype is np.complex128:
        x = x * (1 - 1j)
    y = np.zeros((N[0], n1[rank], N[2]), dtype)
    send_types = subarrays(x.shape, 1, mpitype)
    recv_types = subarrays(y.shape, 0, mpitype)
    ones, zeros = [1] * size, [0] * size
    comm.Alltoallw([x, ones, zeros, send_types], [y, ones, zeros, recv_types])
    print(rank, "forward", dtype.__name__, y.ravel().tolist(), file=_out)
    x2 = np.zeros_like(x)
    comm.Ialltoallw([y, (ones, zeros), recv_types], [x2, (ones, zeros), send_types]).Wait()
    print(rank, "back", dtype.__name__, bool(np.array_equal(x, x2)), file=_out)
