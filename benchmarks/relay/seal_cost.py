"""CPU cost of sealing what fmpi puts in Redis: seal + open of one chunk, per size (rendezvous/redis_seal.py).

Prints µs per seal+open pair and the MB/s one core reaches, the fastest of
`--repeat` timed blocks: the CPU cost itself, without the time other
processes took the core (on a shared machine medians measure the load).
The end-to-end figure (a relayed job over Redis, sealed against the code
before sealing) is ``before_after.py --fmpirun-args "--relay redis://... --channel relay"``.

    .venv/bin/python benchmarks/relay/seal_cost.py
"""

from __future__ import annotations

import argparse
import os
import time

from fmpi.rendezvous.redis_seal import DATA, JobKey, Opener, Sealer

SIZES = (8, 4 << 10, 64 << 10, 256 << 10)  # 256 KiB: the transport's largest relayed chunk


def cost(size: int, repeat: int) -> float:
    """Seconds per seal + open of `size` bytes (the fastest of `repeat` blocks)."""
    key = JobKey("t" * 32, "jbench")
    sealer, opener = Sealer(key, 0), Opener(key, 1)
    data = os.urandom(size)
    per_block = max(5, (8 << 20) // max(size, 1024))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(per_block):
            opener.open(DATA, sealer.seal(DATA, 1, data), ordered=True)
        times.append((time.perf_counter() - start) / per_block)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed blocks per size (default 15)")
    args = parser.parse_args()
    print("| chunk | seal + open | one core |")
    print("|---:|---:|---:|")
    for size in SIZES:
        seconds = cost(size, args.repeat)
        print(f"| {size:,} B | {seconds * 1e6:,.1f} µs | {size / seconds / 1e6:,.0f} MB/s |")


if __name__ == "__main__":
    main()
