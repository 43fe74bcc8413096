"""The flood of issue 25: rank 0 sends many large messages to rank 1, which sleeps before it receives any.

Run under fmpirun (or mpiexec) with two ranks:

    fmpirun -n 2 python benchmarks/p2p/flood.py --count 1500 --size 8M --sleep 20 --mode upper

``--mode upper``: rank 0 ``Isend``s every message, then ``Waitall``;
``--mode lower``: rank 0 ``send``s dicts holding a numpy array (pickled, the
array out of band). Rank 1 sleeps, then receives them all in order and
prints one line: the checksum, the peak RSS of the receiver (MiB), and the
sender's time until its sends completed. Without flow control the receiver
buffers every early message (issue 25: 1.7-2.3 GiB for 1,500 x 8 MiB); with
it, what it holds stays below FMPI_UNEXPECTED_MAX.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from mpi4py import MPI


def size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--size", type=size, default=8 << 20, help="bytes per message (8M, 512K, ...)")
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds the receiver sleeps first")
    parser.add_argument("--mode", choices=("upper", "lower"), default="upper")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    items = args.size // 8
    if comm.rank == 0:
        start = time.monotonic()
        data = np.arange(items, dtype=np.float64)
        if args.mode == "upper":
            MPI.Request.Waitall([comm.Isend(data, dest=1, tag=i % 3) for i in range(args.count)])
        else:
            for i in range(args.count):
                comm.send({"i": i, "a": data}, dest=1, tag=i % 3)
        comm.send(time.monotonic() - start, dest=1, tag=99)
    elif comm.rank == 1:
        time.sleep(args.sleep)
        checksum = 0.0
        out = np.empty(items, dtype=np.float64)
        for i in range(args.count):
            if args.mode == "upper":
                comm.Recv(out, source=0, tag=i % 3)
                checksum += out[-1] + i
            else:
                got = comm.recv(source=0, tag=i % 3)
                checksum += got["a"][-1] + got["i"]
        sender_seconds = comm.recv(source=0, tag=99)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"checksum {checksum:.0f} peak_rss_mib {peak:.0f} sender_seconds {sender_seconds:.2f}", flush=True)


if __name__ == "__main__":
    main()
