"""Collectives on a Lambda-shaped network: fmpi beside MPICH beside the lower bound, one command (root).

    sudo .venv/bin/python benchmarks/netlab.py                          # N = 2, 4, 8; every cell
    sudo .venv/bin/python benchmarks/netlab.py --ns 2,4,8,16,32 --repeat 3 --json netlab.json
    sudo .venv/bin/python benchmarks/netlab.py --probe                  # what the shaping really does
    sudo .venv/bin/python benchmarks/netlab.py --delay-us 350 --rate-mbit 1000 --burst-kb 256

Builds the shaped lab (benchmarks/shaped/lab.py: one network namespace per
rank and for the relay, each with ``--delay-us`` one way and a ``--rate-mbit``
token bucket per direction), then runs OSU-style loops
(benchmarks/collectives/osu_collectives.py's worker) under fmpi (ranks joined
by hand, linked across the lab) and MPICH (hydra across the namespaces, OFI
tcp), interleaved ``--repeat`` times, and prints per N a Markdown table:
each cell's median time per call, fmpi / MPICH, the lower bound
(benchmarks/shaped/bounds.py) and fmpi / bound; published Lambda figures
beside the 8 B allreduce. Sizes are per rank: the vector of allreduce and
bcast, the whole send buffer of alltoall (n/N to each peer).

All hosts share this machine's cores: past a few ranks per core the CPU, not
the network, sets the times (the table's notes say the load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "shaped")]

from bounds import lower_bound, published  # noqa: E402
from lab import Shape, ShapedLab, natlab_available  # noqa: E402,F401 (report_section asks)
from report_section import fmt_us, ratio  # noqa: E402
from runners import Runners  # noqa: E402

OSU = HERE / "collectives" / "osu_collectives.py"
PROBE = HERE / "shaped" / "probe.py"
KiB, MiB = 1 << 10, 1 << 20
CELLS = [("barrier", 0), ("allreduce", 8), ("allreduce", MiB), ("allreduce", 16 * MiB),
         ("bcast", MiB), ("bcast", 16 * MiB), ("alltoall", MiB), ("alltoall", 16 * MiB)]
QUICK_CELLS = [("barrier", 0), ("allreduce", 8), ("allreduce", MiB), ("bcast", MiB), ("alltoall", MiB)]
BACKENDS = ("fmpi", "mpich")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_cells(runners: Runners, backend: str, n: int, cells: list[tuple[str, int]], scale: float) -> dict:
    """{(coll, bytes): µs per call} of one run of every cell on n ranks, {} if the run failed."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for coll in dict.fromkeys(c for c, _ in cells):  # one job per collective: a failure costs one row
            out = Path(tmp) / f"{coll}.json"
            sizes = [b for c, b in cells if c == coll]
            argv = [str(OSU), "--worker", "--out", str(out), "--colls", coll, "--sizes", ",".join(map(str, sizes)),
                    "--max-block", str(1 << 40), "--scale", str(scale), "--alltoall-total"]
            started = time.monotonic()
            ok, note = getattr(runners, backend)(n, argv, {}, timeout=900)
            if not ok:
                log(f"  {backend} N={n} {coll} failed:\n{note}")
                continue
            log(f"  {backend:5s} N={n} {coll}: {time.monotonic() - started:.1f} s  {note}")
            results.update({(r["coll"], r["bytes"]): r["usec"] for r in json.loads(out.read_text())})
    return results


def measure(runners: Runners, n: int, args: argparse.Namespace) -> dict:
    """{backend: {(coll, bytes): [µs of each run]}}, the backends interleaved run by run."""
    samples: dict = {b: {} for b in args.backends}
    for _ in range(args.repeat):
        for backend in args.backends:
            for key, usec in run_cells(runners, backend, n, args.cells, args.scale).items():
                samples[backend].setdefault(key, []).append(usec)
    return samples


def rows(n: int, samples: dict, shape: Shape, alpha_lab: float) -> list[dict]:
    """One dict per cell: medians per backend, the bound, and the bound at the lab's measured α."""
    out = []
    for coll, nbytes in sorted({k for s in samples.values() for k in s}, key=lambda k: (k[0], k[1])):
        med = {b: statistics.median(s[(coll, nbytes)]) if (coll, nbytes) in s else None for b, s in samples.items()}
        bound = lower_bound(coll, nbytes, n, shape.alpha, shape.beta) * 1e6
        lab_bound = lower_bound(coll, nbytes, n, max(alpha_lab, shape.alpha), shape.beta) * 1e6
        out.append({"n": n, "coll": coll, "bytes": nbytes, "bound_us": bound, "lab_bound_us": lab_bound, **{f"{b}_us": v for b, v in med.items()},
                    "runs": {b: s.get((coll, nbytes), []) for b, s in samples.items()}})
    return out


def table(n: int, cells: list[dict]) -> str:
    lines = [f"### N = {n}", "", "| collective | size | fmpi | MPICH | fmpi / MPICH | lower bound | fmpi / bound "
             "| fmpi / bound at the lab's α | published (real Lambda) |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        size = "—" if c["coll"] == "barrier" else (f"{c['bytes'] // MiB} MiB" if c["bytes"] >= MiB else f"{c['bytes']} B")
        pub = ", ".join(published(n)) if (c["coll"], c["bytes"]) == ("allreduce", 8) else ""
        lines.append(f"| {c['coll']} | {size} | {fmt_us(c.get('fmpi_us'))} | {fmt_us(c.get('mpich_us'))} "
                     f"| {ratio(c.get('fmpi_us'), c.get('mpich_us'))} | {fmt_us(c['bound_us'])} "
                     f"| {ratio(c.get('fmpi_us'), c['bound_us'])} | {ratio(c.get('fmpi_us'), c['lab_bound_us'])} | {pub} |")
    return "\n".join(lines)


def probe(lab: ShapedLab, pings: int = 2000, megabytes: int = 64, port: int = 9100) -> dict:
    """Round trip percentiles and one stream's bandwidth between r0 and r1 over plain TCP (probe.py)."""
    server = lab.lab.python("r1", [str(PROBE), "serve", str(port)], stdout=-1, text=True)
    if server.stdout.readline().strip() != "ready":
        raise SystemExit("the probe server did not start")
    client = [sys.executable, str(PROBE), "client", lab.ip("r1"), str(port), "--pings", str(pings), "--megabytes", str(megabytes)]
    result = lab.lab.run("r0", client, timeout=300, check=True)
    server.wait(timeout=30)
    return json.loads(result.stdout.strip().splitlines()[-1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="2,4,8", help="rank counts (default 2,4,8)")
    p.add_argument("--delay-us", type=float, default=Shape.delay_us, help="one-way latency per host (default 150)")
    p.add_argument("--rate-mbit", type=float, default=Shape.rate_mbit, help="sustained rate per host and direction (620)")
    p.add_argument("--burst-kb", type=int, default=Shape.burst_kb, help="token bucket size (1024 KB)")
    p.add_argument("--nat", choices=("none", "cone"), default="none", help="hosts public (default) or each behind a cone NAT")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--quick", action="store_true", help="1 MiB cells only, fewer iterations")
    p.add_argument("--repeat", type=int, default=1, help="runs per backend, interleaved; cells keep the median")
    p.add_argument("--scale", type=float, default=None, help="multiply the iteration counts (default 1, --quick 0.2)")
    p.add_argument("--probe", action="store_true", help="measure the shaped link itself (round trip, bandwidth, delayer cost)")
    p.add_argument("--json", help="write every run's figures here (report.py reads it)")
    args = p.parse_args(argv)
    args.ns = [int(x) for x in args.ns.split(",")]
    args.backends = [b for b in args.backends.split(",") if b]
    args.cells = QUICK_CELLS if args.quick else CELLS
    args.scale = args.scale if args.scale is not None else (0.2 if args.quick else 1.0)
    args.shape = Shape(args.delay_us, args.rate_mbit, args.burst_kb)
    return args


def run(args: argparse.Namespace, echo: bool = True) -> dict:
    """Build the lab, measure every N, tear it down; the figures (and the tables printed when `echo`)."""
    with ShapedLab(max(args.ns + [2]), args.shape, args.nat) as lab:
        if args.probe:
            return {"shape": args.shape.describe(), "probe": probe(lab), "delayers": lab.delayer_stats()}
        # What the lab gives a bare socket now (its delayers' wake-ups and the machine's load included):
        # the bound with this α says how much of a latency-bound cell is the lab's, not the library's.
        floor = probe(lab, pings=400, megabytes=8, port=9101)
        report = {"shape": args.shape.describe(), "alpha": args.shape.alpha, "beta": args.shape.beta,
                  "alpha_lab": floor["rtt_us"]["median"] / 2 * 1e-6, "probe": floor,
                  "cpus": os.cpu_count(), "load": os.getloadavg()[0], "cells": []}
        runners = Runners(lab)
        try:
            for n in args.ns:
                cells = rows(n, measure(runners, n, args), args.shape, report["alpha_lab"])
                report["cells"].extend(cells)
                if echo:
                    print(table(n, cells) + "\n", flush=True)
        finally:
            runners.stop()
            report["delayers"] = lab.delayer_stats()
        report["load_end"] = os.getloadavg()[0]
    return report


def main() -> None:
    args = parse_args()
    if not args.probe:
        print(f"# Collectives on a shaped network: {args.shape.describe()}\n")
    report = run(args)
    if args.probe:
        print(json.dumps(report, indent=1))
        return
    print(f"Load average {report['load']:.1f} at the start, {report['load_end']:.1f} at the end ({os.cpu_count()} CPUs); "
          f"a bare TCP round trip between two hosts took {report['probe']['rtt_us']['median']:.0f} µs (median), "
          f"so the lab's α was {report['alpha_lab'] * 1e6:.0f} µs, not {args.shape.delay_us:g}.")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
