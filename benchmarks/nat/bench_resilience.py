"""Figures of issue 25 items 3-6: a lost relay socket, strangers, a frozen rank, NAT detection.

    python benchmarks/nat/bench_resilience.py strangers [--rounds 7]         (no root needed)
    python benchmarks/nat/bench_resilience.py relay-flood [--rounds 3]       (no root needed)
    python benchmarks/nat/bench_resilience.py freeze [--rounds 20]           (no root needed)
    sudo python benchmarks/nat/bench_resilience.py cuts [--cuts 10]          (the NAT lab)
    sudo python benchmarks/nat/bench_resilience.py detection [--rounds 3]    (the NAT lab)

* ``strangers``: two engines over loopback; the time of rank 0's first
  message to rank 1 (link set-up included) with nothing else on rank 1's
  port, with 100 silent connections to it, and with 100 that sent a HELLO
  claiming rank 0 and stall. Rounds interleave the three; medians and max.
* ``relay-flood``: a real fmpi-relay; 300 strangers each announce a 1 MiB
  frame and send half of it, then close; the relay's resident set above its
  start at the flood's peak and once the strangers are gone, per round.
* ``freeze``: ``fmpirun -n 3``; rank 1 stops itself with SIGSTOP (its
  sockets stay open, only its heartbeats stop); the time from the stop to
  fmpirun's end, which names the rank.
* ``cuts``: three ranks behind cone NATs stream around a ring
  (tests/nat/programs/ring_until.py) while one rank's relay connections are
  cut with ``ss -K`` every second, punched and relayed. For each cut: how
  long the rank took from seeing the loss to being registered again (what
  it prints), and how long the relay counted it away (fmpirun -v).
* ``detection``: four ranks (two symmetric, two cone NATs) exchange with
  everyone; the relay's probe port is filtered in front of one symmetric and
  one cone rank, or not at all. The time the world took to form (the probe
  retries are in it) and the set-up of the pairs of the filtered ranks.

Prints Markdown tables. Not a test: numbers depend on the machine and load.
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "nat"), str(REPO / "tests" / "transport"),
                str(REPO / "tests" / "relay_server"), str(REPO / "tests" / "reliability")]
MiB = 1 << 20


def strangers(rounds: int) -> None:
    from test_link_strangers import _first_message, _strangers

    from fmpi.transport.engine import Engine

    def one(kind: str) -> float:
        listeners = [socket.create_server(("127.0.0.1", 0), backlog=128) for _ in range(2)]
        endpoints = [sock.getsockname() for sock in listeners]
        engines = [Engine(r, 2, b"s" * 32, lambda peer: [endpoints[peer]], listeners[r]) for r in range(2)]
        crowd: list[socket.socket] = []
        try:
            if kind != "none":
                _strangers(engines[1], crowd, 100, hello=kind == "stalled HELLO")
            return _first_message(*engines)
        finally:
            for s in crowd:
                s.close()
            for e in engines:
                e.abandon()

    kinds = ["none", "silent", "stalled HELLO"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for kind in kinds:
            times[kind].append(one(kind))
    print("| on rank 1's port | first message, median | max |")
    print("|---|---:|---:|")
    for kind in kinds:
        label = {"none": "nothing else", "silent": "100 silent connections", "stalled HELLO": "100 stalled HELLOs claiming rank 0"}[kind]
        print(f"| {label} | {statistics.median(times[kind]) * 1e3:.1f} ms | {max(times[kind]) * 1e3:.1f} ms |")


def relay_flood(rounds: int) -> None:
    from test_relay_strangers import _a_job_still_runs, _comes_down_to, _flood_of_half_frames, _rss
    from tests_support import RelayProcess

    relay = RelayProcess()
    rows = []
    try:
        _a_job_still_runs(relay, "warm")
        start = _rss(relay.proc.pid)
        for round_ in range(rounds):
            crowd = _flood_of_half_frames(relay)
            time.sleep(1.0)
            peak = _rss(relay.proc.pid) - start
            _a_job_still_runs(relay, f"during-{round_}")
            for s in crowd:
                s.close()
            rows.append((peak, _comes_down_to(relay.proc.pid, start, 1 * MiB, 10)))
    finally:
        relay.stop()
    print(f"relay at start: {start / MiB:.0f} MiB resident")
    print("| flood | peak above start | after the strangers left (settled, at most 10 s) |")
    print("|---|---:|---:|")
    for i, (peak, after) in enumerate(rows, 1):
        print(f"| {i}: 300 x half of a 1 MiB frame | {peak / MiB:.0f} MiB | {after / MiB:.0f} MiB |")


def freeze(rounds: int) -> None:
    import subprocess

    from test_failure_detection import FREEZE
    from tests_support import fmpirun_argv

    took = []
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "freeze.py"
        prog.write_text(FREEZE)
        for i in range(rounds):
            stamp = Path(tmp) / f"stopped-{i}"
            done = subprocess.run(fmpirun_argv("-n", "3", sys.executable, str(prog), str(stamp)),
                                  capture_output=True, text=True, timeout=60)
            if "rank 1 stopped responding" not in done.stderr:
                raise SystemExit(f"the frozen rank was not named:\n{done.stderr}")
            took.append(time.time() - float(stamp.read_text()))
    print(f"| SIGSTOP to fmpirun's end ({rounds} runs) | median | max | over 5 s |")
    print("|---|---:|---:|---:|")
    print(f"| rank 1 of 3 | {statistics.median(took):.2f} s | {max(took):.2f} s | {sum(t > 5 for t in took)} |")


def _lab(hosts: dict[str, str]):
    from labjob import LabJobs
    from natlab.topology import NatLab, cleanup_stale, natlab_available

    ok, why = natlab_available()
    if not ok:
        raise SystemExit(f"the NAT lab is unavailable: {why}")
    cleanup_stale()
    lab = NatLab()
    lab.start()
    for name, kind in hosts.items():
        lab.add_host(name, kind)
    return lab, LabJobs(lab)


def cuts(count: int) -> None:
    from test_nat_relay_cut import _rank_side

    lab, jobs = _lab({"c1": "cone", "c2": "cone", "c3": "cone"})
    rows = []
    try:
        for channel in ("auto", "relay"):
            with tempfile.TemporaryDirectory() as tmp:
                stop = Path(tmp) / "stop"
                job = jobs.start(["c1", "c2", "c3"], "ring_until.py", [str(stop)], env={"FMPI_CHANNEL": channel})
                for r in range(3):
                    job.wait_for_line(r, "streaming", 60)
                for i in range(count):
                    time.sleep(1.0)
                    _rank_side(lab, f"c{i % 3 + 1}")
                time.sleep(1.0)
                stop.touch()
                run = job.finish(120)
            if any(p.returncode != 0 for p in run.ranks) or run.launcher.returncode != 0:
                raise SystemExit(f"a job with cuts failed:\n{run.describe()}")
            rank_side = [float(t) for p in run.ranks for t in re.findall(r"reconnected to the relay at \S+ in ([\d.]+) s", p.stderr)]
            away = [float(t) for t in re.findall(r"reconnected to the relay after ([\d.]+) s", run.launcher.stderr)]
            rows.append((channel, len(rank_side), rank_side, away))
    finally:
        jobs.stop()
        lab.close()
    print("| links | cuts | rank: loss seen to registered again, median / max | relay: away, median / max | job |")
    print("|---|---:|---:|---:|---|")
    for channel, n, rank_side, away in rows:
        print(f"| {'punched' if channel == 'auto' else 'relayed'} | {n} | {statistics.median(rank_side) * 1e3:.0f} / "
              f"{max(rank_side) * 1e3:.0f} ms | {statistics.median(away) * 1e3:.0f} / {max(away) * 1e3:.0f} ms | rc 0, exact |")


def detection(rounds: int) -> None:
    from labjob import RELAY_PORT

    lab, jobs = _lab({"s1": "symmetric", "s2": "symmetric", "c1": "cone", "c2": "cone"})
    rule = ["FORWARD", "-i", "lan0", "-p", "tcp", "-d", lab.relay_ip, "!", "--dport", str(RELAY_PORT), "-j", "DROP"]
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    try:
        for _ in range(rounds):
            for filtered in (False, True):
                for gw in ("gw-s1", "gw-c2") if filtered else ():
                    lab.run(gw, ["iptables", "-I", *rule], check=True)
                try:
                    run = jobs.run(["s1", "s2", "c1", "c2"], "exchange.py")
                finally:
                    for gw in ("gw-s1", "gw-c2") if filtered else ():
                        lab.run(gw, ["iptables", "-D", *rule], check=True)
                if any(p.returncode != 0 for p in run.ranks):
                    raise SystemExit(f"a job failed:\n{run.describe()}")
                world = float(re.search(r"the world formed in ([\d.]+) s", run.launcher.stderr).group(1))
                s1 = max(run.setup[pair] for pair in [(0, 1), (0, 2), (0, 3)])
                c2 = run.setup[(2, 3)]
                results[filtered].append((world, s1, c2))
    finally:
        jobs.stop()
        lab.close()
    print("| probe port | world formed, median | set-up of s1's links (symmetric), max | c1-c2 (cone), median |")
    print("|---|---:|---:|---:|")
    for filtered in (False, True):
        rows = results[filtered]
        print(f"| {'filtered at s1, c2' if filtered else 'open'} | {statistics.median(r[0] for r in rows):.2f} s | "
              f"{max(r[1] for r in rows):.2f} s | {statistics.median(r[2] for r in rows) * 1e3:.0f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["strangers", "relay-flood", "freeze", "cuts", "detection"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cuts", type=int, default=10)
    args = parser.parse_args()
    if args.part == "strangers":
        strangers(args.rounds)
    elif args.part == "relay-flood":
        relay_flood(args.rounds)
    elif args.part == "freeze":
        freeze(args.rounds)
    elif args.part == "cuts":
        cuts(args.cuts)
    else:
        detection(args.rounds)


if __name__ == "__main__":
    main()
