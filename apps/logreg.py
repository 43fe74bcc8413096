"""Logistic regression by full-batch gradient descent, data-parallel: one Allreduce of the gradient per iteration.

Demonstrates: the logistic-regression workload of stateful-serverless evaluations (CRUCIAL, Cirrus):
points x 100 features, 100 iterations of gradient descent. Each rank generates only its own shard
of the synthetic dataset (apps/synthetic.py) and computes its part of the gradient.
Collectives: Allreduce SUM (gradient, bias gradient and loss packed in one buffer, every iteration;
the final count of correct predictions).

The result is deterministic for a given N and MPI library, and equal within floating-point rounding
(~1e-12 relative) across N and between mpiexec and fmpirun: the gradient is a float sum whose
rounding depends on the reduction order.

    mpiexec -n 4 python apps/logreg.py --points 200000
    fmpirun -n 4 python apps/logreg.py --points 200000
    fmpirun -n 100 --backend lambda python apps/logreg.py --gb 100     # 125e6 points, 1 GB per rank
"""

import argparse

import numpy as np
import synthetic
from mpi4py import MPI

from fmpi import checkpoint

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--points", type=int, default=200_000, help="total points over all ranks")
parser.add_argument("--gb", type=float, help="size the dataset in GB of float64 features instead of --points")
parser.add_argument("--features", type=int, default=100, help="features per point")
parser.add_argument("--iterations", type=int, default=100, help="gradient-descent iterations")
parser.add_argument("--lr", type=float, default=1.0, help="learning rate")
parser.add_argument("--l2", type=float, default=1e-4, help="L2 regularization strength")
parser.add_argument("--seed", type=int, default=1, help="dataset seed")
parser.add_argument("--save", help="rank 0 writes the final weights (bias last) to this .npy file")
args = parser.parse_args()

total = synthetic.points_for_gb(args.gb, args.features) if args.gb else args.points
d = args.features
start, count = synthetic.partition(total, comm.size, comm.rank)

t0 = MPI.Wtime()
x, y = synthetic.logistic(args.seed, start, count, d)
t_data = MPI.Wtime() - t0


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


w = np.zeros(d + 1)  # weights, then the bias
buf = np.empty(d + 2)  # gradient sums, bias gradient sum, loss sum
loss = float("nan")
t1 = MPI.Wtime()
# Past one launch's time limit: continue from the newest checkpoint (fmpi.checkpoint; a no-op outside
# fmpirun --max-runtime), with a result identical to an uninterrupted run.
(w, loss), done = checkpoint.restore((w, loss), 0)
for iteration in range(done, args.iterations):
    z = x @ w[:d] + w[d]
    error = sigmoid(z) - y
    buf[:d] = x.T @ error
    buf[d] = error.sum()
    buf[d + 1] = (np.logaddexp(0.0, z) - y * z).sum()  # cross-entropy, stable
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    loss = buf[d + 1] / total + 0.5 * args.l2 * float(w[:d] @ w[:d])  # at the weights before this step
    grad = buf[: d + 1] / total
    grad[:d] += args.l2 * w[:d]
    w -= args.lr * grad
    checkpoint.save((w, loss), iteration + 1)
t_iter = MPI.Wtime() - t1

correct = np.array([np.count_nonzero((x @ w[:d] + w[d] > 0) == (y > 0.5))], dtype=np.int64)
comm.Allreduce(MPI.IN_PLACE, correct, op=MPI.SUM)

if comm.rank == 0:
    print(
        f"logreg points={total} features={d} iterations={args.iterations} "
        f"loss={loss:.12e} accuracy={correct[0] / total:.6f} correct={correct[0]} weightnorm={np.linalg.norm(w):.12e}"
    )
    print(f"time {MPI.Wtime() - t0:.3f} s (generate {t_data:.3f} s, iterate {t_iter:.3f} s) on {comm.size} ranks")
    if args.save:
        np.save(args.save, w)
