"""NAT traversal benchmark in the namespace NAT lab (needs root, iproute2, iptables).

    sudo python benchmarks/nat/bench_links.py [--sizes 2,4,8,16] [--max-size BYTES] [--seconds S]

1. Link set-up: N ranks, each behind its own cone NAT, every rank links to
   every other (all-pairs exchange). Reports the per-link set-up time that
   fmpirun prints (median, max: from the first message to a usable link,
   hole punch included) and the wall time until all N(N-1)/2 links carried
   their first message.
2. Latency and bandwidth of one link, two ranks: punched (cone NATs) and
   relayed (FMPI_CHANNEL=relay, same hosts), plus direct (two public hosts)
   for reference; the OSU-style program of benchmarks/p2p.

Prints Markdown tables. Not a test: numbers depend on the machine and load.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "nat")]

from labjob import LabJobs  # noqa: E402
from natlab.topology import NatLab, cleanup_stale, natlab_available  # noqa: E402

SETUP_PROGRAM = textwrap.dedent(
    """
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    t0 = MPI.Wtime()
    for k in range(1, size):
        comm.sendrecv(rank, dest=(rank + k) % size, source=(rank - k) % size)
    took = MPI.Wtime() - t0
    slowest = comm.allreduce(took, op=MPI.MAX)
    if rank == 0:
        print(f"ALLPAIRS {slowest:.6f}", flush=True)
    print(f"rank {rank} ok", flush=True)
    """
)


def setup_times(jobs: LabJobs, sizes: list[int], program: Path) -> list[dict]:
    rows = []
    for n in sizes:
        hosts = [f"c{i}" for i in range(1, n + 1)]
        run = jobs.run(hosts, str(program), timeout=180)
        if any(p.returncode != 0 for p in run.ranks):
            raise SystemExit(f"the {n}-rank job failed:\n{run.describe()}")
        times = sorted(run.setup.values())
        allpairs = float(next(line.split()[1] for line in run.ranks[0].stdout.splitlines() if line.startswith("ALLPAIRS")))
        rows.append({
            "n": n, "links": len(run.links), "counts": run.counts,
            "median": times[len(times) // 2], "max": times[-1], "allpairs": allpairs,
        })
    return rows


def p2p(jobs: LabJobs, hosts: list[str], env: dict, max_size: int, seconds: float) -> dict[int, dict]:
    osu = REPO / "benchmarks" / "p2p" / "osu_p2p.py"
    run = jobs.run(hosts, str(osu), ["--max-size", str(max_size), "--seconds", str(seconds)], env=env, timeout=600)
    if any(p.returncode != 0 for p in run.ranks):
        raise SystemExit(f"the p2p job on {hosts} failed:\n{run.describe()}")
    rows = [json.loads(line) for line in run.ranks[0].stdout.splitlines() if line.startswith("{")]
    kind = next(iter(run.links.values()), "?")
    return {"kind": kind, "rows": {r["size"]: r for r in rows}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,4,8,16", help="rank counts for the set-up table")
    ap.add_argument("--max-size", type=int, default=4 << 20, help="largest message for latency/bandwidth")
    ap.add_argument("--seconds", type=float, default=0.2, help="rough time per message size")
    args = ap.parse_args()
    ok, reason = natlab_available()
    if not ok:
        raise SystemExit(f"cannot build the NAT lab: {reason}")
    sizes = [int(s) for s in args.sizes.split(",")]
    cleanup_stale()
    with NatLab() as lab, tempfile.TemporaryDirectory() as tmp:
        for i in range(1, max(sizes + [2]) + 1):
            lab.add_host(f"c{i}", "cone")
        lab.add_host("p1", "none")
        lab.add_host("p2", "none")
        program = Path(tmp) / "allpairs.py"
        program.write_text(SETUP_PROGRAM)
        jobs = LabJobs(lab)
        try:
            setup = setup_times(jobs, sizes, program)
            links = {
                "direct (public hosts)": p2p(jobs, ["p1", "p2"], {}, args.max_size, args.seconds),
                "punched (cone NATs)": p2p(jobs, ["c1", "c2"], {}, args.max_size, args.seconds),
                "relayed (cone NATs)": p2p(jobs, ["c1", "c2"], {"FMPI_CHANNEL": "relay"}, args.max_size, args.seconds),
            }
        finally:
            jobs.stop()

    print("### Link set-up, N ranks each behind its own cone NAT, all pairs linked\n")
    print("| N | links | punched | relayed | set-up per link, median | max | all pairs linked and used |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in setup:
        print(f"| {r['n']} | {r['links']} | {r['counts'].get('punched', 0)} | {r['counts'].get('relayed', 0)} "
              f"| {r['median'] * 1000:.1f} ms | {r['max'] * 1000:.1f} ms | {r['allpairs'] * 1000:.0f} ms |")
    names = list(links)
    print("\n### One link: latency (half round trip) and bandwidth\n")
    print("| size | " + " | ".join(f"{n} µs" for n in names) + " | " + " | ".join(f"{n} MB/s" for n in names) + " |")
    print("|---:|" + "---:|" * (2 * len(names)))
    for size in sorted(links[names[0]]["rows"]):
        lat = [links[n]["rows"][size]["latency_us"] for n in names]
        bw = [links[n]["rows"][size].get("bandwidth_MBps") for n in names]
        print(f"| {size} | " + " | ".join(f"{v:.0f}" for v in lat) + " | "
              + " | ".join("-" if v is None else f"{v:.0f}" for v in bw) + " |")
    print("\n(link kinds as fmpirun reported them: " + ", ".join(f"{n}: {links[n]['kind']}" for n in names) + ")")


if __name__ == "__main__":
    main()
