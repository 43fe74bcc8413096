"""``Dup``, ``Clone`` and ``Idup`` of a Cartesian, graph or distributed-graph communicator keep its class and
its topology, as MPI_Comm_dup does (issue 26): the copy answers the same topology queries and its
neighborhood collectives reach the same neighbours. Compared with MPICH + mpi4py line for line, at N = 1,
2 and 4.
"""

import pytest

from tests_support import OUTCOMES_PRELUDE

pytestmark = pytest.mark.timeout(300)

TOPOLOGY_DUP = OUTCOMES_PRELUDE + r"""
n = comm.size
cart = comm.Create_cart([n, 1], periods=[True, False])
ring = [sorted({(i - 1) % n, (i + 1) % n}) for i in range(n)]  # symmetric: a graph's neighbours send and receive
graph = comm.Create_graph([sum(map(len, ring[:i + 1])) for i in range(n)], [j for near in ring for j in near])
dist = comm.Create_dist_graph_adjacent([source], [peer], sourceweights=[3], destweights=[4])

def topology(c):
    if isinstance(c, MPI.Cartcomm):
        return c.Get_topo(), c.Shift(0, 1)
    if isinstance(c, MPI.Graphcomm):
        return c.Get_topo(), c.Get_neighbors(c.rank)
    if isinstance(c, MPI.Distgraphcomm):
        return c.Get_dist_neighbors()
    return None

for name, c in (("cart", cart), ("graph", graph), ("dist", dist)):
    for how in ("Dup", "Clone", "Idup"):
        d = getattr(c, how)()
        if how == "Idup":
            d, request = d
            request.Wait()
        out.append((name, how, type(d).__name__, d.Get_topology() == c.Get_topology(), d.is_topo,
                    topology(d) == topology(c), MPI.Comm.Compare(d, c)))
        outcome((name, how, "neighbors"), lambda: d.neighbor_allgather(comm.rank))
        d.Free()
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2, 4])
def test_topology_survives_dup_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: the copies were plain Intracomms, without topology or neighbours."""
    as_under_mpich(TOPOLOGY_DUP, n)
