"""Barrier and allreduce latency through fmpi-relay shared objects (DSO) vs a naive store-and-poll baseline.

    .venv/bin/python benchmarks/relay/bench_dso.py                      # N = 2, 4, 8 on a relay it starts
    .venv/bin/python benchmarks/relay/bench_dso.py --ns 8 --scale 0.5
    .venv/bin/python benchmarks/relay/bench_dso.py --relay tcp://a:7000,b:7000   # relays already running

N client processes (one per rank) share one job's objects:

* DSO: ``barrier`` = one Barrier.wait per rank (one round trip); ``allreduce``
  = one Reducer.contribute per rank, whose reply is the result (the relay
  folds the contributions with numpy in rank order).
* naive (in the style of storage-based FaaS ML systems): every rank writes
  its value under its own key of a Map, polls the Map's key list until all N
  keys of the round are there, then reads all N values (pipelined) and
  folds them itself. The barrier is the same with empty values.

Latency is OSU's: the mean time per call over the timed iterations, after a
warm-up, averaged over ranks. Printed as one Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

SIZES = {"8 B": (1, np.int64), "1 MiB": (1 << 18, np.float32), "16 MiB": (1 << 22, np.float32)}


# --------------------------------------------------------------------- worker
def worker(spec: dict) -> dict:
    from fmpi.dso_client.client import DsoClient

    rank, n = spec["rank"], spec["n"]
    c = DsoClient(spec["relays"], spec["job"], spec["token"], rank=rank, size=n, timeout=120)
    c.connect_all()
    poll = spec["poll_ms"] / 1000.0
    sync_gen = [0]

    def sync() -> None:
        c.barrier("sync", sync_gen[0])
        sync_gen[0] += 1

    def naive_exchange(m, it: int, value: np.ndarray | None) -> np.ndarray | None:
        m.put(f"{it}/{rank}", b"" if value is None else value.view(np.uint8))
        prefix = f"{it}/"
        while m.count(prefix) < n:
            if poll:
                time.sleep(poll)
        if it >= 2:
            m.delete(f"{it - 2}/{rank}")  # everyone has read round it-2 once it reached round it
        if value is None:
            return None
        parts = [m.get_async(f"{it}/{r}") for r in range(n)]
        acc = None
        for p in parts:  # fold in rank order, like the relay does
            x = np.frombuffer(p.result(), dtype=value.dtype)
            acc = x.copy() if acc is None else np.add(acc, x, out=acc)
        return acc

    out: dict[str, float] = {}
    ops = []
    for kind in spec.get("kinds", ("dso", "naive")):
        ops.append((kind, "barrier", None))
        for size in spec["sizes"]:
            ops.append((kind, "allreduce", size))
    for kind, coll, size in ops:
        iters = spec["iters"][coll if size is None else size]
        warm = max(2, iters // 10)
        tag = f"{kind}-{coll}-{size}"
        value = None
        if size is not None:
            count, dtype = SIZES[size]
            value = np.full(count, rank + 1, dtype=dtype)
        m = c.map("naive/" + tag)
        expect = sum(range(1, n + 1))
        t0 = 0.0
        sync()
        for it in range(warm + iters):
            if it == warm:
                sync()
                t0 = time.perf_counter()
            if kind == "dso" and coll == "barrier":
                c.barrier(tag, it)
            elif kind == "dso":
                res = c.allreduce(tag, it, rank, value)
            else:
                res = naive_exchange(m, it, value)
            if size is not None and (res[0] != expect or res[-1] != expect):
                raise SystemExit(f"rank {rank}: wrong {tag} result {res[:2]} (expected {expect})")
        out[tag] = (time.perf_counter() - t0) / iters
    sync()
    c.close()
    return out


# ----------------------------------------------------------------------- main
def start_relay() -> tuple[subprocess.Popen, str]:
    binary = Path(sys.executable).parent / "fmpi-relay"
    cmd = [str(binary)] if binary.exists() else [sys.executable, "-m", "fmpi.relay_server.cli"]
    proc = subprocess.Popen(
        cmd + ["--host", "127.0.0.1", "--port", "0", "--probe-port", "-1", "--log-level", "WARNING", "--dso-job-bytes", "1G"],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("fmpi-relay listening on "):
        proc.kill()
        raise SystemExit(f"fmpi-relay did not start: {line!r}")
    return proc, line.split()[-1]


def run_n(relays: str, n: int, args: argparse.Namespace) -> dict[str, float]:
    from fmpi.dso_client.host import DsoHost

    job, token = "bench-" + uuid.uuid4().hex[:10], uuid.uuid4().hex
    iters = {"barrier": max(5, int(200 * args.scale)), "8 B": max(5, int(200 * args.scale)), "1 MiB": max(3, int(20 * args.scale)),
             "16 MiB": max(3, int(5 * args.scale))}
    with DsoHost(relays, job, token):
        procs = []
        for rank in range(n):
            spec = {"relays": relays, "job": job, "token": token, "rank": rank, "n": n, "iters": iters,
                    "sizes": args.sizes, "poll_ms": args.poll_ms, "kinds": getattr(args, "kinds", ("dso", "naive"))}
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], stdout=subprocess.PIPE, text=True))
        results = []
        try:
            for p in procs:
                out, _ = p.communicate(timeout=1800)
                if p.returncode != 0:
                    raise SystemExit(f"a worker failed (exit {p.returncode})")
                results.append(json.loads(out))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    return {k: sum(r[k] for r in results) / n for k in results[0]}


def fmt(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:,.0f} µs" if us < 10_000 else f"{us / 1000:,.1f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--relay", help="tcp://host:port[,host:port...] of running relays (default: start one)")
    p.add_argument("--ns", default="2,4,8", help="numbers of ranks (default %(default)s)")
    p.add_argument("--sizes", default="8 B,1 MiB", help="allreduce sizes among: " + ", ".join(SIZES))
    p.add_argument("--scale", type=float, default=1.0, help="multiply the iteration counts (200 barrier/8 B, 20 of 1 MiB)")
    p.add_argument("--poll-ms", type=float, default=1.0, help="naive baseline: sleep between polls (default %(default)s ms)")
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    args.sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in args.sizes:
        if s not in SIZES:
            raise SystemExit(f"unknown size {s!r} (one of {', '.join(SIZES)})")
    ns = [int(x) for x in args.ns.split(",")]
    proc = None
    relays = args.relay
    if relays is None:
        proc, relays = start_relay()
    try:
        rows = []
        for n in ns:
            res = run_n(relays, n, args)
            for coll in ["barrier"] + [f"allreduce {s}" for s in args.sizes]:
                c, _, size = coll.partition(" ")
                dso, naive = res[f"dso-{c}-{size or None}"], res[f"naive-{c}-{size or None}"]
                rows.append((coll, n, dso, naive))
            print(f"N = {n} done", file=sys.stderr, flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    print(f"\nrelays: {relays}; {os.cpu_count()} CPUs; naive poll interval {args.poll_ms:g} ms; mean latency per call, averaged over ranks\n")
    print("| collective | N | DSO objects | naive store-and-poll | naive / DSO |")
    print("|---|---:|---:|---:|---:|")
    for coll, n, dso, naive in rows:
        print(f"| {coll} | {n} | {fmt(dso)} | {fmt(naive)} | {naive / dso:.1f}× |")


if __name__ == "__main__":
    main()
