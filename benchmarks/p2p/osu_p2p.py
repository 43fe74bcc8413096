"""OSU-style point-to-point latency and bandwidth, as an mpi4py program (runs under mpiexec and fmpirun).

Latency: half of the round-trip time of a Send/Recv ping-pong. Bandwidth: a
window of Isend's answered by one ack (osu_bw). Prints one JSON line per size
from rank 0.

    fmpirun -n 2 python benchmarks/p2p/osu_p2p.py --max-size 67108864
"""

import argparse
import json

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--max-size", type=int, default=64 << 20)
parser.add_argument("--window", type=int, default=16)
parser.add_argument("--seconds", type=float, default=0.5, help="rough time budget per size and test")
args = parser.parse_args()
assert comm.size == 2, "run with exactly 2 ranks"
peer = 1 - comm.rank

sizes = [0] + [1 << k for k in range(0, args.max_size.bit_length()) if (1 << k) <= args.max_size]


def iterations(size: int) -> int:
    # Fewer iterations for big messages; decided by rank 0 and shared, so both agree.
    guess = int(args.seconds / (20e-6 + size / 1e9))
    return comm.bcast(max(3, min(guess, 20000)) if comm.rank == 0 else None, root=0)


ack = np.zeros(1, dtype="u1")
for size in sizes:
    buf = np.ones(size, dtype="u1")
    n = iterations(size)
    warm = max(1, n // 10)
    comm.Barrier()
    for i in range(n + warm):
        if i == warm:
            start = MPI.Wtime()
        if comm.rank == 0:
            comm.Send(buf, peer, 1)
            comm.Recv(buf, peer, 1)
        else:
            comm.Recv(buf, peer, 1)
            comm.Send(buf, peer, 1)
    latency = (MPI.Wtime() - start) / n / 2
    bandwidth = None
    if size:
        n_bw = max(2, n // args.window)
        # Receive buffers are made (and touched) once, outside the timed loop, as
        # osu_bw does: fresh ones per window would time page faults, not transfers.
        bufs = [np.ones(size, dtype="u1") for _ in range(min(args.window, 4))]
        comm.Barrier()
        for i in range(1 + n_bw):  # the first window warms up
            if i == 1:
                start = MPI.Wtime()
            if comm.rank == 0:
                MPI.Request.Waitall([comm.Isend(buf, peer, 2) for _ in range(args.window)])
                comm.Recv(ack, peer, 3)
            else:
                reqs = [comm.Irecv(bufs[j % len(bufs)], peer, 2) for j in range(args.window)]
                MPI.Request.Waitall(reqs)
                comm.Send(ack, peer, 3)
        bandwidth = size * args.window * n_bw / (MPI.Wtime() - start)
    if comm.rank == 0:
        print(json.dumps({"size": size, "latency_us": latency * 1e6, "bandwidth_MBps": bandwidth and bandwidth / 1e6}), flush=True)
