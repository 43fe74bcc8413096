"""Differential: Cartesian, graph and distributed-graph topologies and their neighborhood collectives."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, value):
    print(f"{rank} {name} {value!r}", file=_out)


def exercise(name, topo, sort_sources=False):
    """Every neighborhood collective on `topo`; `sort_sources`: MPI leaves the in-edge order open."""
    sources, destinations = topo.inoutedges
    indeg, outdeg = len(sources), len(destinations)

    def result(arr, per):
        blocks = [arr[i * per:(i + 1) * per].tolist() for i in range(indeg)]
        return sorted(zip(sources, blocks)) if sort_sources else blocks

    out(f"{name}-edges", (sorted(sources) if sort_sources else sources, destinations))
    send = np.array([rank * 100 + j for j in range(outdeg)], "i")
    got = np.full(indeg, -1, "i")
    topo.Neighbor_alltoall(send, got)
    out(f"{name}-alltoall", result(got, 1))
    got = np.full(2 * indeg, -1, "i")
    topo.Neighbor_allgather(np.array([rank, -rank], "i"), got)
    out(f"{name}-allgather", result(got, 2))
    got = np.full(2 * indeg, -1, "i")
    topo.Ineighbor_allgatherv(np.array([rank, rank], "i"), [got, [2] * indeg]).Wait()
    out(f"{name}-iallgatherv", result(got, 2))
    got = np.full(indeg, -1, "i")
    topo.Neighbor_alltoallv([send, [1] * outdeg], [got, [1] * indeg])
    out(f"{name}-alltoallv", result(got, 1))
    got = np.full(indeg, -1.0)
    w_send = send.astype("d")
    topo.Ineighbor_alltoallw([w_send, [1] * outdeg, [8 * j for j in range(outdeg)], [MPI.DOUBLE] * outdeg],
                             [got, [1] * indeg, [8 * i for i in range(indeg)], [MPI.DOUBLE] * indeg]).Wait()
    out(f"{name}-ialltoallw", result(got, 1))
    got = np.full(indeg, -1, "i")
    persistent = topo.Neighbor_alltoall_init(send, got)
    persistent.Start()
    persistent.Wait()
    out(f"{name}-persistent", result(got, 1))
    objs = topo.neighbor_alltoall([(rank, j) for j in range(outdeg)])
    out(f"{name}-objects", sorted(map(str, objs)) if sort_sources else objs)
    out(f"{name}-gathered-objects", sorted(map(str, topo.neighbor_allgather(rank))) if sort_sources else
        topo.neighbor_allgather(rank))


for ndim in (1, 2, 3):
    dims = MPI.Compute_dims(size, ndim)
    for periodic in (True, False):
        cart = comm.Create_cart(dims, periods=[periodic] * ndim)
        out(f"cart{ndim}{periodic}", (cart.dims, cart.periods, cart.coords, [cart.Shift(d, 1) for d in range(ndim)],
                                       comm.Cart_map(dims, [periodic] * ndim)))
        exercise(f"cart{ndim}{periodic}", cart)
        if ndim > 1:
            sub = cart.Sub([True] + [False] * (ndim - 1))
            out(f"cart{ndim}{periodic}-sub", (sub.dims, sub.coords, sub.size))
        cart.Free()
index, edges = [], []
for i in range(size):
    edges.extend([(i - 1) % size, (i + 1) % size, i])
    index.append(len(edges))
graph = comm.Create_graph(index, edges)
out("graph", (graph.Get_dims(), graph.Get_topo(), graph.neighbors, comm.Graph_map(index, edges)))
exercise("graph", graph)
adjacent = comm.Create_dist_graph_adjacent([(rank - 2) % size, (rank - 1) % size], [(rank + 1) % size, (rank + 2) % size],
                                           [1, 2], [3, 4])
out("adjacent", adjacent.Get_dist_neighbors())
exercise("adjacent", adjacent)
dist = comm.Create_dist_graph([rank], [3], [(rank - 1) % size, rank, (rank + 1) % size], [5, 6, 7])
count = dist.Get_dist_neighbors_count()
found = dist.Get_dist_neighbors()
out("dist", (count, sorted(zip(found[0], found[2][0])), found[1], found[2][1]))
exercise("dist", dist, sort_sources=True)
