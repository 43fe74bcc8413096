"""k-means clustering (Lloyd's algorithm), data-parallel: one Allreduce of centroid sums and counts per iteration.

Demonstrates: the bulk-synchronous loop of iterative ML, as in the k-means workload of stateful-serverless
evaluations (CRUCIAL, Cirrus): points x 100 features, k = 25, 10 iterations. Each rank generates only
its own shard of the synthetic dataset (apps/synthetic.py), so the data never moves.
Collectives: Bcast (initial centroids from rank 0), Allreduce SUM (per-cluster coordinate sums and
counts packed in one buffer, every iteration; the final inertia, as an int64 fixed-point sum).

The printed result is identical for any N and under mpiexec or fmpirun: features are multiples of
2**-16, so centroid sums are exact in any summation order, and the inertia is summed in fixed point.
(Only a point equidistant from two centroids to within rounding could be assigned differently.)

    mpiexec -n 4 python apps/kmeans.py --points 200000
    fmpirun -n 4 python apps/kmeans.py --points 200000
    fmpirun -n 100 --backend lambda python apps/kmeans.py --gb 100     # 125e6 points, 1 GB per rank
    fmpirun -n 100 --backend lambda --max-runtime 2h python apps/kmeans.py --gb 100 --iterations 5000

Past one launch's time limit (Lambda's 15 minutes): the centroids are checkpointed at iteration
boundaries (fmpi.checkpoint; a no-op outside fmpirun --max-runtime), and a relaunched world continues
from the newest checkpoint with a result identical to an uninterrupted run.
"""

import argparse
import hashlib

import numpy as np
import synthetic
from mpi4py import MPI

from fmpi import checkpoint

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--points", type=int, default=200_000, help="total points over all ranks")
parser.add_argument("--gb", type=float, help="size the dataset in GB of float64 features instead of --points")
parser.add_argument("--features", type=int, default=100, help="features per point")
parser.add_argument("-k", "--clusters", type=int, default=25, help="number of clusters k")
parser.add_argument("--iterations", type=int, default=10, help="Lloyd iterations")
parser.add_argument("--seed", type=int, default=1, help="dataset seed")
parser.add_argument("--block", type=int, default=1 << 15, help="points per distance block (bounds temporaries)")
parser.add_argument("--save", help="rank 0 writes the final centroids to this .npy file")
args = parser.parse_args()

total = synthetic.points_for_gb(args.gb, args.features) if args.gb else args.points
k, d = args.clusters, args.features
if total < k:
    parser.error(f"need at least k={k} points")
start, count = synthetic.partition(total, comm.size, comm.rank)

t0 = MPI.Wtime()
x, _ = synthetic.blobs(args.seed, start, count, d)
t_data = MPI.Wtime() - t0

# Initial centroids: the first k points of the dataset (rank 0 builds them, everyone receives them).
centroids = np.empty((k, d))
if comm.rank == 0:
    centroids[:] = synthetic.blobs(args.seed, 0, k, d)[0]
comm.Bcast(centroids, root=0)


def nearest(block: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid of every row: argmin |x|^2 - 2 x.c + |c|^2 (the |x|^2 term is constant)."""
    return np.argmin((c * c).sum(axis=1) - 2.0 * (block @ c.T), axis=1)


t1 = MPI.Wtime()
buf = np.empty((k, d + 1))  # per cluster: coordinate sums, then the count
sizes = np.zeros(k)
(centroids, sizes), done = checkpoint.restore((centroids, sizes), 0)
for iteration in range(done, args.iterations):
    buf[:] = 0.0
    for lo in range(0, count, args.block):
        block = x[lo : lo + args.block]
        onehot = np.zeros((len(block), k))
        onehot[np.arange(len(block)), nearest(block, centroids)] = 1.0
        buf[:, :d] += onehot.T @ block  # exact: sums of multiples of 2**-16
        buf[:, d] += onehot.sum(axis=0)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    sizes = buf[:, d]
    nonempty = sizes > 0  # an empty cluster keeps its centroid
    centroids[nonempty] = buf[nonempty, :d] / sizes[nonempty, None]
    checkpoint.save((centroids, sizes.copy()), iteration + 1)
t_iter = MPI.Wtime() - t1

# Inertia (sum of squared distances to the nearest centroid), row by row and in fixed point
# (units of 2**-16) so that its sum is exact and independent of how rows are split among ranks.
fixed = np.zeros(1, dtype=np.int64)
for lo in range(0, count, args.block):
    block = x[lo : lo + args.block]
    dist2 = ((block - centroids[nearest(block, centroids)]) ** 2).sum(axis=1)
    fixed[0] += int(np.rint(dist2 * 2.0**16).astype(np.int64).sum())
comm.Allreduce(MPI.IN_PLACE, fixed, op=MPI.SUM)

if comm.rank == 0:
    digest = hashlib.sha256(centroids.tobytes()).hexdigest()[:16]
    cluster_sizes = ",".join(str(int(s)) for s in sorted(sizes, reverse=True)[:5])
    print(
        f"kmeans points={total} features={d} k={k} iterations={args.iterations} "
        f"inertia={fixed[0] / 2.0**16:.6f} largest={cluster_sizes} centroids={digest}"
    )
    print(f"time {MPI.Wtime() - t0:.3f} s (generate {t_data:.3f} s, iterate {t_iter:.3f} s) on {comm.size} ranks")
    if args.save:
        np.save(args.save, centroids)
