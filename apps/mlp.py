"""Data-parallel SGD training of a small numpy MLP: one Allreduce of the flattened gradients per step.

Demonstrates: synchronous data-parallel training, the pattern of Horovod and DistributedDataParallel,
with the model in plain numpy. Every rank holds the same parameters; each global minibatch is split
among the ranks, each computes the gradient of its slice, one Allreduce sums the gradients (fused into
a single flat buffer together with the loss), and every rank applies the same SGD-with-momentum step.
Collectives: Bcast (initial parameters from rank 0), Allreduce SUM (gradients + loss every step;
correct test predictions at the end).

Data: points labelled by a random "teacher" MLP (apps/synthetic.py). Rank r owns slice r of every
minibatch, i.e. the same global batches are used whatever N is, so the trained model equals a
single-process run up to floating-point rounding (the gradient sum depends on the reduction order):
compare results across N or MPI libraries with a tolerance, not exactly.

    mpiexec -n 4 python apps/mlp.py --train 65536 --epochs 3
    fmpirun -n 4 python apps/mlp.py --train 65536 --epochs 3
"""

import argparse

import numpy as np
import synthetic
from mpi4py import MPI

from fmpi import checkpoint

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--train", type=int, default=65536, help="training points")
parser.add_argument("--test", type=int, default=8192, help="held-out test points")
parser.add_argument("--features", type=int, default=16, help="input features")
parser.add_argument("--classes", type=int, default=4, help="output classes")
parser.add_argument("--hidden", type=int, default=64, help="hidden units")
parser.add_argument("--batch", type=int, default=256, help="global minibatch size (split among the ranks)")
parser.add_argument("--epochs", type=int, default=3, help="passes over the training set")
parser.add_argument("--lr", type=float, default=0.1, help="learning rate")
parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
parser.add_argument("--seed", type=int, default=1, help="dataset and initialization seed")
parser.add_argument("--save", help="rank 0 writes the final flat parameter vector to this .npy file")
args = parser.parse_args()

f, h, c, batch = args.features, args.hidden, args.classes, args.batch
if batch > args.train:
    parser.error("--batch is larger than --train")
steps_per_epoch = args.train // batch  # a last partial batch is dropped

t0 = MPI.Wtime()
# This rank's slice of every global batch: rows [b * batch + lo, b * batch + lo + mine) of batch b.
lo, mine = synthetic.partition(batch, comm.size, comm.rank)
xs, ys = zip(*(synthetic.teacher(args.seed, b * batch + lo, mine, f, c) for b in range(steps_per_epoch)))
x_train, y_train = np.stack(xs), np.stack(ys)  # (steps, mine, f), (steps, mine)
test_start, test_count = synthetic.partition(args.test, comm.size, comm.rank)
x_test, y_test = synthetic.teacher(args.seed, args.train + test_start, test_count, f, c)

# All parameters live in one flat vector (as do the gradients), so one Allreduce moves them all.
shapes = {"w1": (f, h), "b1": (h,), "w2": (h, c), "b2": (c,)}
sizes = [int(np.prod(s)) for s in shapes.values()]
params = np.zeros(sum(sizes))
grads = np.zeros(sum(sizes) + 1)  # + the loss sum


def views(flat: np.ndarray) -> dict[str, np.ndarray]:
    offsets = np.cumsum([0, *sizes])
    return {name: flat[offsets[i] : offsets[i + 1]].reshape(shape) for i, (name, shape) in enumerate(shapes.items())}


p, g = views(params), views(grads)
if comm.rank == 0:  # He initialization; the biases start at zero
    rng = np.random.default_rng(args.seed)
    p["w1"][:] = rng.standard_normal((f, h)) * np.sqrt(2.0 / f)
    p["w2"][:] = rng.standard_normal((h, c)) * np.sqrt(2.0 / h)
comm.Bcast(params, root=0)


def forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(x @ p["w1"] + p["b1"], 0.0)
    return hidden, hidden @ p["w2"] + p["b2"]


velocity = np.zeros_like(params)
t1 = MPI.Wtime()
# Past one launch's time limit: continue from the newest checkpoint (fmpi.checkpoint; a no-op outside
# fmpirun --max-runtime), with a result identical to an uninterrupted run. (Copied into `params`: the
# per-layer views in `p` and `g` stay views of it.)
(saved_params, saved_velocity, losses, epoch_loss), done = checkpoint.restore((params, velocity, [], 0.0), 0)
params[:], velocity[:] = saved_params, saved_velocity
for done_steps in range(done, args.epochs * steps_per_epoch):
    step = done_steps % steps_per_epoch
    if step == 0:
        epoch_loss = 0.0
    x, y = x_train[step], y_train[step]
    hidden, logits = forward(x)
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    # Sums over this rank's rows (divided by the global batch size after the Allreduce).
    grads[-1] = -np.log(prob[np.arange(len(y)), y]).sum()
    dlogits = prob
    dlogits[np.arange(len(y)), y] -= 1.0
    g["w2"][:] = hidden.T @ dlogits
    g["b2"][:] = dlogits.sum(axis=0)
    dhidden = (dlogits @ p["w2"].T) * (hidden > 0)
    g["w1"][:] = x.T @ dhidden
    g["b1"][:] = dhidden.sum(axis=0)
    comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM)
    grads /= batch
    velocity *= args.momentum
    velocity -= args.lr * grads[:-1]
    params += velocity
    epoch_loss += grads[-1]
    if step == steps_per_epoch - 1:
        losses.append(epoch_loss / steps_per_epoch)
    checkpoint.save((params, velocity, losses, epoch_loss), done_steps + 1)
t_train = MPI.Wtime() - t1

correct = np.array([np.count_nonzero(np.argmax(forward(x_test)[1], axis=1) == y_test)], dtype=np.int64)
comm.Allreduce(MPI.IN_PLACE, correct, op=MPI.SUM)

if comm.rank == 0:
    print(
        f"mlp train={args.train} test={args.test} batch={batch} epochs={args.epochs} "
        f"loss={losses[-1]:.10e} test_accuracy={correct[0] / args.test:.6f} paramnorm={np.linalg.norm(params):.10e}"
    )
    print(f"time {MPI.Wtime() - t0:.3f} s (train {t_train:.3f} s, {args.epochs * steps_per_epoch} steps) on {comm.size} ranks")
    if args.save:
        np.save(args.save, params)
