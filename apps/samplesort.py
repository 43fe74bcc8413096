"""Parallel sample sort of int64 keys: regular sampling, then one all-to-all exchange of the keys.

Demonstrates: the all-to-all pattern (shuffles, joins, distributed sort), the hardest traffic for a
serverless network. Each rank generates its own keys (apps/synthetic.py), sorts them, and contributes
--oversample regularly spaced samples; the sorted samples give N - 1 splitters; each rank cuts its keys
into N buckets, exchanges bucket sizes, then the buckets themselves, and merges what it receives.
Collectives: Allgather (samples; per-rank count/first/last for the check), Alltoall (bucket sizes),
Alltoallv (the keys), Exscan (global offset of each rank's output), Allreduce SUM (checksums),
Gather + Gatherv (--save).

The output is the sorted sequence of all keys spread over the ranks in order; the printed checksum and
order fingerprint depend only on the keys (identical for any N and under mpiexec or fmpirun), and
`sorted=yes` is a global check that every rank's part is sorted and follows the previous rank's.

    mpiexec -n 4 python apps/samplesort.py --keys 4000000
    fmpirun -n 4 python apps/samplesort.py --keys 4000000 --dist skewed
"""

import argparse

import numpy as np
import synthetic
from mpi4py import MPI

PRIME = 2**31 - 1  # checksums are taken modulo this prime (products of two residues fit in int64)

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--keys", type=int, default=2_000_000, help="total keys over all ranks")
parser.add_argument("--dist", choices=["uniform", "skewed"], default="uniform", help="key distribution")
parser.add_argument("--oversample", type=int, default=64, help="samples each rank contributes to choose splitters")
parser.add_argument("--seed", type=int, default=1, help="key seed")
parser.add_argument("--save", help="rank 0 gathers the sorted keys into this .npy file")
args = parser.parse_args()

size = comm.size
start, count = synthetic.partition(args.keys, size, comm.rank)
local = synthetic.keys(args.seed, start, count, args.dist)
checksum_in = np.array([int((local % PRIME).sum())], dtype=np.int64)  # order-independent

t0 = MPI.Wtime()
local.sort()

# 1. Splitters by regular sampling (ranks without keys contribute the largest key value, which sorts last).
s = args.oversample
samples = np.full(s, np.iinfo(np.int64).max, dtype=np.int64)
if count:
    samples[:] = local[(np.arange(1, s + 1) * count) // (s + 1)]
all_samples = np.empty(s * size, dtype=np.int64)
comm.Allgather(samples, all_samples)
all_samples.sort()
splitters = all_samples[np.arange(1, size) * s]

# 2. Bucket i (keys below splitter i, at or above splitter i - 1) goes to rank i.
cuts = np.concatenate([[0], np.searchsorted(local, splitters, side="left"), [count]])
send_counts = np.diff(cuts).astype(np.int64)
recv_counts = np.empty(size, dtype=np.int64)
comm.Alltoall(send_counts, recv_counts)

# 3. Exchange the keys, then merge the (already sorted) runs received.
send_displs = cuts[:-1].astype(np.int64)
recv_displs = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(np.int64)
result = np.empty(int(recv_counts.sum()), dtype=np.int64)
comm.Alltoallv([local, (send_counts, send_displs), MPI.INT64_T], [result, (recv_counts, recv_displs), MPI.INT64_T])
result.sort(kind="stable")
elapsed = MPI.Wtime() - t0

# Checks. Global position of this rank's first output key, by an exclusive prefix sum of the counts.
mine = np.array([len(result)], dtype=np.int64)
offset = np.zeros(1, dtype=np.int64)
comm.Exscan(mine, offset, op=MPI.SUM)
if comm.rank == 0:
    offset[0] = 0  # MPI leaves rank 0's Exscan output undefined
positions = (np.arange(len(result), dtype=np.int64) + offset[0] + 1) % PRIME
sums = np.array(
    [int((result % PRIME).sum()), int((positions * (result % PRIME) % PRIME).sum())], dtype=np.int64
)  # each term < PRIME, so the sums cannot overflow for fewer than 2**32 keys per rank
comm.Allreduce(MPI.IN_PLACE, checksum_in, op=MPI.SUM)
comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
edges = np.array([len(result), result[0] if len(result) else 0, result[-1] if len(result) else 0], dtype=np.int64)
all_edges = np.empty((size, 3), dtype=np.int64)
comm.Allgather(edges, all_edges)
nonempty = all_edges[all_edges[:, 0] > 0]
in_order = bool(np.all(result[:-1] <= result[1:])) and bool(np.all(nonempty[:-1, 2] <= nonempty[1:, 1]))
complete = int(all_edges[:, 0].sum()) == args.keys and sums[0] % PRIME == checksum_in[0] % PRIME

if args.save:
    counts = np.empty(size, dtype=np.int64) if comm.rank == 0 else None
    comm.Gather(mine, counts, root=0)
    everything = np.empty(args.keys, dtype=np.int64) if comm.rank == 0 else None
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]) if comm.rank == 0 else None
    comm.Gatherv(result, [everything, (counts, displs), MPI.INT64_T] if comm.rank == 0 else None, root=0)

if comm.rank == 0:
    imbalance = all_edges[:, 0].max() / (args.keys / size)
    print(
        f"samplesort keys={args.keys} dist={args.dist} sorted={'yes' if in_order and complete else 'NO'} "
        f"checksum={sums[0] % PRIME} fingerprint={sums[1] % PRIME}"
    )
    print(f"time {elapsed:.3f} s on {size} ranks, largest bucket {imbalance:.3f} x the mean")
    if args.save:
        np.save(args.save, everything)
