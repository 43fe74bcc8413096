"""Several ranks per function on a Lambda-shaped network: N ranks as N functions x 1 against F functions x K (root).

    sudo .venv/bin/python benchmarks/collectives/ranks_per_function.py                  # 16x1 vs 4x4, 16 MiB
    sudo .venv/bin/python benchmarks/collectives/ranks_per_function.py --functions 2 --per 2 --size 4M --iters 3
    sudo .venv/bin/python benchmarks/collectives/ranks_per_function.py --functions 3 --per 3 --collective bcast --root 4

Each "function" is a host of the shaped lab (benchmarks/shaped/lab.py: its own network namespace, its
link capped at ``--rate-mbit`` each way after a burst, ``--delay-us`` one way), so the K ranks of one
function share one capped NIC, as on Lambda. Three layouts of the same N = F*K ranks run the same
allreduce, bcast or reduce (``--collective``; ``--size`` bytes per rank, float64 sums):

- ``FxK flat``:   K ranks per host, the collectives as if every rank had its own network;
- ``FxK hier``:   K ranks per host, FMPI_RANKS_PER_NODE=K (what the Lambda handler sets for
                  ``fmpirun --ranks-per-function K``): reduce inside the host, allreduce between leaders,
                  broadcast back (collectives/allreduce_hierarchical.py);
- ``Nx1``:        one rank per host (N hosts, N capped NICs): the reference.

No shared memory between ranks (FMPI_SHM=0: Lambda has no /dev/shm); the K ranks of a host link over
loopback TCP. Prints the median time per call of each layout (rank 0's clock) and what every rank's
result summed to (equal across layouts up to floating-point order). All hosts share this machine's
cores: with many ranks per core, CPU rather than the network sets the times (the load is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "shaped")]

MiB = 1 << 20


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": MiB, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def worker(size: int, iters: int, collective: str, root: int) -> None:
    """One rank: time `iters` calls of `collective` on `size` bytes; rank 0 prints one RESULT line."""
    import numpy as np

    from fmpi import MPI

    comm = MPI.COMM_WORLD
    send = np.full(size // 8, comm.rank + 1, dtype=np.float64)
    recv = np.empty_like(send)
    call = {
        "allreduce": lambda: comm.Allreduce(send, recv),
        "bcast": lambda: comm.Bcast(recv if comm.rank != root else send, root=root),
        "reduce": lambda: comm.Reduce(send, recv if comm.rank == root else None, root=root),
    }[collective]
    call()  # warm-up: links made
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    worst = comm.allreduce(statistics.median(times), op=MPI.MAX)
    if comm.rank == 0:
        print("RESULT " + json.dumps({"median_s": worst, "times": times, "value": float(recv[0])}), flush=True)


def run_layouts(args: argparse.Namespace) -> list[dict]:
    from lab import Shape, ShapedLab
    from runners import Runners

    n = args.functions * args.per
    shape = Shape(delay_us=args.delay_us, rate_mbit=args.rate_mbit, burst_kb=args.burst_kb)
    layouts = [(f"{args.functions}x{args.per} flat", args.per, 1), (f"{args.functions}x{args.per} hier", args.per, args.per),
               (f"{n}x1", 1, 1)]
    results = []
    with ShapedLab(n, shape) as lab:
        runners = Runners(lab)
        try:
            for _ in range(args.repeat):
                for name, per, per_node in layouts:
                    hosts = [lab.hosts[r // per] for r in range(n)]
                    env = {"FMPI_SHM": "0", "FMPI_RANKS_PER_NODE": str(per_node), "FMPI_NETWORK": "lambda"}
                    if n > (os.cpu_count() or 1):
                        env["FMPI_SPIN_US"] = "0"  # (see runners.py: sleeping waits leave the cores to the work)
                    used = sorted(set(hosts))
                    before = _sent(lab, used)
                    t0 = time.monotonic()
                    run = runners.jobs.run(hosts, str(Path(__file__).resolve()),
                                           ["--worker", "--size", str(args.size), "--iters", str(args.iters),
                                            "--collective", args.collective, "--root", str(args.root)],
                                           timeout=args.timeout, env=env)
                    line = next((x for x in run.ranks[0].stdout.splitlines() if x.startswith("RESULT ")), None)
                    ok = line is not None and all(p.returncode == 0 for p in run.ranks)
                    after = _sent(lab, used)
                    # What crossed each host's capped link, per call (the warm-up call included; the join and
                    # the barriers add a few KB): the network volume, whatever the CPU load did to the times.
                    per_call = [(after[h] - before[h]) / (args.iters + 1) / MiB for h in used]
                    entry = {"layout": name, "ok": ok, "wall_s": round(time.monotonic() - t0, 1),
                             "load": os.getloadavg()[0], "nic_mib_per_call_max": round(max(per_call), 1),
                             "nic_mib_per_call_total": round(sum(per_call), 1)}
                    entry.update(json.loads(line[7:]) if line else {"error": run.describe()[-2000:]})
                    print(json.dumps(entry), flush=True)
                    results.append(entry)
        finally:
            runners.stop()
    return results


def _sent(lab, hosts: list[str]) -> dict[str, int]:
    """Bytes each host has sent on its eth0 (its capped link) so far."""
    import subprocess

    out = {}
    for host in hosts:
        raw = subprocess.run(["ip", "-n", lab.lab.ns(host), "-s", "-j", "link", "show", "eth0"], capture_output=True,
                             text=True, check=True).stdout
        out[host] = int(json.loads(raw)[0]["stats64"]["tx"]["bytes"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--functions", type=int, default=4, help="F: functions (hosts) of the shared layouts (default 4)")
    parser.add_argument("--per", type=int, default=4, help="K: ranks per function (default 4)")
    parser.add_argument("--size", type=parse_size, default=16 * MiB, help="bytes per rank (default 16M)")
    parser.add_argument("--iters", type=int, default=5, help="timed calls per layout (default 5)")
    parser.add_argument("--repeat", type=int, default=1, help="run the layouts this many times, interleaved")
    parser.add_argument("--rate-mbit", type=float, default=620.0, help="each host's cap (default 620, Lambda's sustained)")
    parser.add_argument("--burst-kb", type=int, default=256, help="bytes at line rate before the cap holds")
    parser.add_argument("--delay-us", type=float, default=150.0, help="one-way latency (0: no delayer processes)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per job")
    parser.add_argument("--collective", choices=["allreduce", "bcast", "reduce"], default="allreduce")
    parser.add_argument("--root", type=int, default=0, help="the root of bcast and reduce (default 0)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.worker:
        worker(args.size, args.iters, args.collective, args.root)
        return
    results = run_layouts(args)
    print(f"\n{args.collective} of {args.size / MiB:g} MiB per rank (root {args.root}), {args.functions * args.per} ranks, "
          f"{args.rate_mbit:g} Mbit/s per host, {args.delay_us:g} µs one way")
    print("| layout | median per call | MiB sent per call by the busiest host | by all hosts | load |\n|---|---|---|---|---|")
    for entry in results:
        median = entry.get("median_s")
        print(f"| {entry['layout']} | {'-' if median is None else f'{median * 1000:.0f} ms'} | "
              f"{entry['nic_mib_per_call_max']} | {entry['nic_mib_per_call_total']} | {entry['load']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
