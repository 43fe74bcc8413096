"""One table: send/recv, barrier and allreduce latency over every channel fmpi has, and a naive store-and-poll baseline.

    .venv/bin/python benchmarks/relay/bench_channels.py                             # N = 2, 4, 8; 8 B, 1 MiB, 16 MiB
    .venv/bin/python benchmarks/relay/bench_channels.py --ns 2 --scale 0.02 --sizes 8   # a smoke run
    .venv/bin/python benchmarks/relay/bench_channels.py --ns 8 --sizes 8,1M --scale 0.2

Issue 5 item 6. For each N, one row per channel:

* direct TCP — plain ``fmpirun -n N`` (fmpi's TCP links, the point-to-point algorithms);
* relay forwarding — ``fmpirun -n N --channel relay`` with ``FMPI_COLL_ALGO`` forcing
  the point-to-point algorithms (dissemination barrier; recursive doubling or the ring,
  the faster of the two), every message forwarded by the fmpi-relay fmpirun starts;
* DSO objects — ``fmpirun -n N --channel relay``, the collective table's default there
  (server-side Barrier / Reducer on fmpi-relay);
* Redis — ``fmpirun -n N --relay redis://... --channel relay`` against a ``redis-server``
  started here on a free port (server-side scripts);
* naive store-and-poll — every rank writes its value to a Map on an fmpi-relay, polls
  until all N are there, reads all N and folds them itself (bench_dso.py's baseline;
  no send/recv).

The four fmpirun rows run bench_server_collectives.py's worker program, the naive row
bench_dso.py's; send/recv is a ping-pong between ranks 0 and 1 inside the same N-rank
job (the others wait at a barrier), reported as half the round trip. Latency is OSU's:
mean time per call after a warm-up, averaged over ranks. The last column is
naive / that row for the smallest allreduce, and the line under the table checks the
target: the server-side forms (DSO, Redis) beat the naive baseline by at least N/2× at
N = 8 for small allreduce.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "soak"))
import bench_dso  # noqa: E402
import bench_server_collectives as bsc  # noqa: E402
from rendezvous_1024 import RedisService  # noqa: E402

# label -> bytes; "8", "1M", "16M" (or the labels themselves) on the command line
SIZES = {"8 B": 8, "1 MiB": 1 << 20, "16 MiB": 16 << 20}
ALIASES = {"8": "8 B", "8B": "8 B", "1M": "1 MiB", "1MIB": "1 MiB", "16M": "16 MiB", "16MIB": "16 MiB"}
CHANNELS = ["direct TCP", "relay forwarding", "DSO objects", "Redis", "naive store-and-poll"]
SERVER_SIDE = ["DSO objects", "Redis"]


def parse_sizes(text: str) -> list[str]:
    out = []
    for s in (x.strip() for x in text.split(",")):
        if not s:
            continue
        label = s if s in SIZES else ALIASES.get(s.replace(" ", "").upper())
        if label is None:
            raise SystemExit(f"unknown size {s!r} (one of {', '.join(SIZES)}, or 8, 1M, 16M)")
        out.append(label)
    return out


def fmpirun_rows(n: int, sizes: list[str], iters: int, redis_url: str) -> dict[str, dict[str, float]]:
    """The four fmpirun channels, as {channel: {op: seconds}} with ops 'send/recv L', 'barrier', 'allreduce L'."""
    allred = {label: max(1, SIZES[label] // 8) for label in sizes}  # float64 elements
    pp = {label: SIZES[label] for label in sizes}
    kw = {"sizes": allred, "pingpong": pp}
    rows = {
        "direct TCP": bsc.run(n, None, None, iters, channel=None, **kw),
        "relay forwarding": bsc.run_p2p(n, None, iters, **kw),
        "DSO objects": bsc.run(n, None, None, iters, **kw),
        "Redis": bsc.run(n, redis_url, None, iters, **kw),
    }
    return rows


def naive_row(relays: str, n: int, sizes: list[str], scale: float, poll_ms: float) -> dict[str, float]:
    args = argparse.Namespace(scale=scale, sizes=sizes, poll_ms=poll_ms, kinds=("naive",))
    res = bench_dso.run_n(relays, n, args)
    row = {"barrier": res["naive-barrier-None"]}
    for label in sizes:
        row["allreduce " + label] = res[f"naive-allreduce-{label}"]
    return row


def _keep_minimum(table: dict[str, dict[str, float]], rows: dict[str, dict[str, float]]) -> None:
    """Merge one run into `table`, cell by cell keeping the fastest (other load only ever slows a run down)."""
    for channel, row in rows.items():
        kept = table.setdefault(channel, {})
        for op, seconds in row.items():
            kept[op] = min(seconds, kept.get(op, seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="2,4,8", help="numbers of ranks (default %(default)s)")
    ap.add_argument("--sizes", default="8,1M,16M", help="message / vector sizes among 8, 1M, 16M (default %(default)s)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the iteration counts (200 for small ops; 0.02 for a smoke run)")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="naive baseline: sleep between polls (default %(default)s ms)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run everything this many times, interleaved; each cell keeps its minimum (a shared machine)")
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",") if x.strip()]
    sizes = parse_sizes(args.sizes)
    if not sizes:
        raise SystemExit("--sizes: at least one size")
    if min(ns) < 2:
        raise SystemExit("--ns: send/recv needs at least 2 ranks")
    iters = max(5, int(200 * args.scale))
    ops = [f"send/recv {s}" for s in sizes] + ["barrier"] + [f"allreduce {s}" for s in sizes]
    small = f"allreduce {sizes[0]}"

    redis = RedisService()
    relay_proc, relays = bench_dso.start_relay()  # for the naive baseline's Map
    table: dict[int, dict[str, dict[str, float]]] = {}
    try:
        for rep in range(max(1, args.repeat)):
            for n in ns:
                rows = fmpirun_rows(n, sizes, iters, redis.url)
                rows["naive store-and-poll"] = naive_row(relays, n, sizes, args.scale, args.poll_ms)
                _keep_minimum(table.setdefault(n, {}), rows)
                print(f"run {rep + 1}: N = {n} done", file=sys.stderr, flush=True)
    finally:
        relay_proc.terminate()
        relay_proc.wait(10)
        redis.stop()

    runs = f"; the minimum of {args.repeat} interleaved runs per cell" if args.repeat > 1 else ""
    print(f"\n{os.cpu_count()} CPUs; {iters} iterations for small ops (fewer ≥ 1 MiB); naive poll interval "
          f"{args.poll_ms:g} ms; mean latency per call, averaged over ranks (send/recv: half the 0↔1 round trip){runs}\n")
    print("| N | channel | " + " | ".join(ops) + f" | naive / this, {small} |")
    print("|---:|---|" + "---:|" * (len(ops) + 1))
    for n in ns:
        naive = table[n]["naive store-and-poll"][small]
        for ch in CHANNELS:
            row = table[n][ch]
            cells = [bsc.fmt(row[op]) if op in row else "—" for op in ops]
            ratio = "—" if ch == "naive store-and-poll" else f"{naive / row[small]:.1f}×"
            print(f"| {n} | {ch} | " + " | ".join(cells) + f" | {ratio} |")

    target_n = 8 if 8 in ns else max(ns)
    naive = table[target_n]["naive store-and-poll"][small]
    checks = [(ch, naive / table[target_n][ch][small]) for ch in SERVER_SIDE]
    ok = all(r >= target_n / 2 for _, r in checks)
    what = ", ".join(f"{ch} {r:.1f}×" for ch, r in checks)
    note = "" if target_n == 8 else f" (N = 8 not run: checked at N = {target_n})"
    print(f"\ntarget: server-side forms ≥ N/2 = {target_n / 2:g}× faster than naive for {small} at N = {target_n}"
          f"{note}: {what} — {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
