"""Load: one rendezvous service holding N simulated ranks (default 1024) until every one has the WORLD.

A real ``fmpi-relay`` subprocess (and, with ``--redis``, a real
``redis-server`` on a free port) and lightweight clients: a few worker
processes, each running many threads, each thread one rank that only does
what a rank's bootstrap does at rendezvous (connect, REGISTER, wait for the
WORLD) and then what its first collective makes the transport do (LOOKUP the
records of its log2 N recursive-doubling partners, in one frame), with
fmpi's own client code (``fmpi.rendezvous.relay_connection`` /
``fmpi.rendezvous.redis``). No MPI runtime, no listener: the endpoints
are made up.

Phases, all clocks ``time.monotonic()`` (system-wide on Linux, so comparable
across the worker processes):

1. every client connects (not timed as part of the world);
2. the launcher sends CREATE (t0); the clients are released and REGISTER;
3. each client records when its WORLD arrived (and its bytes on the wire),
   then looks its partners up and checks their records.

The service's side is timed apart from the clients' (they share the cores):
a thread of the launcher stamps each event as it arrives, so "published
after the last join" is the time between the last 'joined' event and the
'world' event, which the relay sends once it has written every rank's WORLD
(Redis: both come from the last registrant's script).

Printed: the service's publish time after the last join, per-rank WORLD
bytes and LOOKUP answer bytes, time to full world (CREATE -> the last client
has the WORLD, and the same from the last join), first/median WORLD arrival,
the time the last lookup was answered, and the service's peak RSS (VmHWM of
the relay / redis-server process) with its RSS before the job. One Markdown
table at the end.

    .venv/bin/python benchmarks/soak/rendezvous_1024.py                       # fmpi-relay, 1024 ranks
    .venv/bin/python benchmarks/soak/rendezvous_1024.py --ranks 4096 --procs 8
    .venv/bin/python benchmarks/soak/rendezvous_1024.py --redis               # and the same against Redis
    .venv/bin/python benchmarks/soak/rendezvous_1024.py --ranks 256 --procs 2 --redis --json
    .venv/bin/python benchmarks/soak/rendezvous_1024.py --ranks 4096 --procs 8 --shards 3   # 1 relay, then 3

``--shards K`` also measures the rendezvous sharded over K fmpi-relay
processes (``FMPI_SHARD_RENDEZVOUS=1``, ``tcp://a,b,c``: rank r registers at
relay r mod K, the launcher is ``rendezvous.job_control(url, sharded=True)``).
Per relay it prints the registrations it held (from its own log: "world of N
ranks published (M registered here ...)") and the CPU seconds it spent
from CREATE to the last lookup (``/proc/PID/stat`` utime + stime).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

BIN = Path(sys.executable).parent


# ---------------------------------------------------------------- process memory
def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- services
class RelayService:
    def __init__(self, ranks: int) -> None:
        # A long heartbeat timeout: the lightweight clients never beat (a real rank's engine does). Its log (INFO:
        # a line per job created and per world published) goes to a file, for the registrations it held.
        self.log = open(f"/tmp/fmpi-soak-relay-{os.getpid()}-{uuid.uuid4().hex[:8]}.log", "w+")
        self.proc = subprocess.Popen(
            [str(BIN / "fmpi-relay"), "--host", "127.0.0.1", "--port", "0", "--probe-port", "-1",
             "--max-strangers", str(max(1024, ranks + 64)),  # (it connects every rank before any registers)
             "--heartbeat-timeout", "600", "--log-level", "INFO"],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("fmpi-relay listening on tcp://"):
            self.stop()
            raise RuntimeError(f"fmpi-relay did not start: {line!r}")
        self.url = line.split()[-1]

    def registered_here(self) -> int | None:
        """What the relay logged it held when it published the world (a sharded job), else None."""
        self.log.seek(0)
        found = re.findall(r"published \((\d+) registered here", self.log.read())
        return int(found[-1]) if found else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


class Relays:
    """K fmpi-relay processes; `url` lists them all (tcp://a,b,c), `urls` each one."""

    def __init__(self, ranks: int, shards: int) -> None:
        self.relays: list[RelayService] = []
        try:
            for _ in range(shards):
                self.relays.append(RelayService(ranks))
        except BaseException:
            self.stop()
            raise
        self.urls = [r.url for r in self.relays]
        self.url = "tcp://" + ",".join(u[len("tcp://"):] for u in self.urls)
        self.proc = self.relays[0].proc

    def stop(self) -> None:
        for r in self.relays:
            r.stop()


class RedisService:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if not binary:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--maxclients", "10000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{port}/0"
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


# ---------------------------------------------------------------- clients (worker processes)
def partners_of(rank: int, size: int) -> list[int]:
    """The peers a recursive-doubling collective makes `rank` link to: log2 N of them."""
    return [rank ^ (1 << k) for k in range(max(1, (size - 1).bit_length())) if rank ^ (1 << k) < size]


def _frame(conn) -> tuple:
    """The next frame but heartbeats: (kind, body bytes, bytes on the wire)."""
    from fmpi.wire.relay_protocol import HEADER_SIZE, Kind

    kind = Kind.HEARTBEAT
    while kind is Kind.HEARTBEAT:
        kind, payload = conn.next_frame()
    return kind, payload, HEADER_SIZE + len(payload)


def _relay_world(conn) -> tuple[int, int]:
    """(the WORLD's bytes on the wire, the job's size)."""
    from fmpi.wire.relay_protocol import Kind, decode_body

    kind, payload, nbytes = _frame(conn)
    assert kind is Kind.WORLD, kind
    return nbytes, decode_body(kind, payload)["size"]


def _relay_lookup(conn, ranks: list[int]) -> tuple[int, dict]:
    """LOOKUP `ranks`: (the PEERS answer's bytes on the wire, its body)."""
    from fmpi.wire.relay_protocol import Kind, decode_body

    conn.send(Kind.LOOKUP, {"ranks": ranks})
    kind, payload, nbytes = _frame(conn)
    assert kind is Kind.PEERS, kind
    return nbytes, decode_body(kind, payload)


def _worker(kind: str, url: str, job: str, token: str, ranks: list[int], size: int,
            connected: mp.Queue, go: mp.Event, results: mp.Queue, shard_urls: list[str] | None = None) -> None:
    """One process: a thread per rank. Connect, report, wait for `go`, register, wait for the world."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),) * 2)
    threading.stack_size(256 << 10)
    out: list[dict] = []
    lock = threading.Lock()
    ready = threading.Barrier(len(ranks) + 1)

    def one(rank: int) -> None:
        rec: dict = {"rank": rank}
        conn = None
        try:
            if kind == "relay":
                from fmpi.rendezvous.relay_connection import RelayConnection

                # (sharded: rank r registers at relay r mod K, as FmpiRelayRendezvous does)
                conn = RelayConnection(shard_urls[rank % len(shard_urls)] if shard_urls else url, timeout=60)
            else:
                from fmpi.rendezvous.redis import RedisRank

                conn = RedisRank(url, job, token)
        except Exception as exc:  # noqa: BLE001 - reported, counted as a failure
            rec["error"] = f"connect: {exc!r}"
        ready.wait()
        go.wait()
        if "error" not in rec:
            try:
                t = time.monotonic()
                deadline = t + 300
                endpoints = [("127.0.0.1", 20000 + rank)]
                partners = partners_of(rank, size)
                if kind == "relay":
                    from fmpi.rendezvous.relay_connection import register

                    got, got_size, _ = register(conn, job, token, rank, uuid.uuid4().hex, endpoints, timeout=120)
                    rec["registered"] = time.monotonic()
                    rec["world_bytes"], world_size = _relay_world(conn)
                    rec["world"] = time.monotonic()
                    rec["lookup_bytes"], answer = _relay_lookup(conn, partners)
                else:
                    got, got_size = conn.register(rank, uuid.uuid4().hex, endpoints)
                    rec["registered"] = time.monotonic()
                    world_size = conn.wait_world(deadline)
                    rec["world"] = time.monotonic()
                    answer = conn.lookup(partners)
                    rec["lookup_bytes"] = len(json.dumps(answer, separators=(",", ":")))
                rec["looked_up"] = time.monotonic()
                rec["register_s"] = rec["registered"] - t
                found = {p["rank"]: p["endpoints"] for p in answer["peers"]}
                ok = got == rank and got_size == world_size == size and not answer["missing"]
                ok = ok and found == {p: [["127.0.0.1", 20000 + p]] for p in partners}
                if not ok:
                    rec["error"] = f"bad world: rank {got}, size {got_size}/{world_size}, lookup {answer}"[:300]
            except Exception as exc:  # noqa: BLE001
                rec["error"] = repr(exc)
        with lock:
            out.append(rec)
        return conn

    conns: list = [None] * len(ranks)

    def run(i: int, rank: int) -> None:
        conns[i] = one(rank)

    threads = [threading.Thread(target=run, args=(i, r), daemon=True) for i, r in enumerate(ranks)]
    for th in threads:
        th.start()
    ready.wait()
    connected.put(len(ranks))
    go.wait()
    for th in threads:
        th.join()
    results.put(out)
    results.close()
    results.join_thread()
    # Hold the connections until told to stop (a rank's vanishing would fail the job early).
    go_stop_path = os.environ.get("SOAK_STOP_FILE", "")
    while go_stop_path and not os.path.exists(go_stop_path):
        time.sleep(0.05)
    for c in conns:
        try:
            if c is None:
                continue
            if kind == "relay":
                c.close()
            else:
                for client in c.hand_over():  # both connections; close() would push a _stop notice
                    client.close()
        except Exception:
            pass


# ---------------------------------------------------------------- one measurement
def measure(kind: str, size: int, procs: int, shards: int = 1) -> dict:
    service = Relays(size, shards) if kind == "relay" else RedisService()
    pid = service.proc.pid
    pids = [r.proc.pid for r in service.relays] if kind == "relay" else [pid]
    job, token = "soak" + secrets.token_hex(6), secrets.token_urlsafe(24)
    stop_file = f"/tmp/fmpi-soak-stop-{os.getpid()}-{job}"
    os.environ["SOAK_STOP_FILE"] = stop_file
    ctx = mp.get_context("fork")
    connected, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    sharded = kind == "relay" and len(pids) > 1
    urls = service.urls if sharded else None
    workers = [ctx.Process(target=_worker, args=(kind, service.url, job, token, part, size, connected, go, results, urls))
               for part in [list(range(size))[i::procs] for i in range(procs)] if part]
    launcher = None
    stamps: dict[str, float] = {}  # when the launcher heard the last 'joined', and 'world' (and its seconds)
    heard_world = threading.Event()

    def stamp(kind_: str, body: dict) -> None:
        if kind_ == "joined":
            stamps["last_joined"] = time.monotonic()
        elif kind_ == "world":
            stamps["world"] = time.monotonic()
            stamps["world_seconds"] = float(body.get("seconds", stamps["world"] - t0))
            heard_world.set()

    try:
        t_connect = time.monotonic()
        for w in workers:
            w.start()
        n = sum(connected.get(timeout=300) for _ in workers)
        t_connected = time.monotonic()
        mem_before = proc_status(pid)
        cpu_before = [cpu_seconds(p) for p in pids]
        # CREATE (t0), then release the clients.
        t0 = time.monotonic()
        if sharded:
            from fmpi import rendezvous

            class Stamper:
                def event(self, kind_: str, body: dict) -> None:
                    stamp(kind_, body)

                def aborted(self, exc) -> None:
                    print(f"aborted: {exc}", file=sys.stderr)

                def failed(self, exc) -> None:
                    print(f"failed: {exc}", file=sys.stderr)

                def resume_state(self):
                    return None

            launcher = rendezvous.job_control(service.url, sharded=True)
            launcher.create(job, token, size, 300, Stamper())
        elif kind == "relay":
            from fmpi.rendezvous.relay_connection import RelayConnection
            from fmpi.wire.relay_protocol import Kind

            launcher = RelayConnection(service.url, timeout=30)
            launcher.send(Kind.CREATE, {"job": job, "token": token, "size": size, "fill_timeout": 300})
            launcher.expect(Kind.CREATED, timeout=30)

            def follow(conn=launcher) -> None:
                while not heard_world.is_set():
                    k, body = conn.recv(timeout=300)
                    if k is Kind.EVENT:
                        stamp(str(body.get("type")), body)

            threading.Thread(target=follow, daemon=True).start()
        else:
            from fmpi.rendezvous.redis import RedisJob

            launcher = RedisJob(service.url, job, token, size, 300, stamp)
        t_created = time.monotonic()
        go.set()
        recs: list[dict] = []
        for _ in workers:
            recs += results.get(timeout=600)
        heard_world.wait(60)
        cpu_after = [cpu_seconds(p) for p in pids]
        mem_after = proc_status(pid)
        peaks = [proc_status(p)["VmHWM"] for p in pids]
        redis_peak = None
        if kind == "redis":
            info = service.client.info("memory")
            redis_peak = info.get("used_memory_peak")
        errors = [r for r in recs if "error" in r]
        worlds = sorted(r["world"] for r in recs if "world" in r)
        lookups = sorted(r["looked_up"] for r in recs if "looked_up" in r)
        world_bytes = [r["world_bytes"] for r in recs if "world_bytes" in r]
        lookup_bytes = [r["lookup_bytes"] for r in recs if "lookup_bytes" in r]
        last_join = stamps.get("last_joined")

        def since(t: float | None, start: float | None) -> float | None:
            return round(t - start, 3) if t is not None and start is not None else None

        result = {
            "service": (f"fmpi-relay x{len(pids)}" if sharded else "fmpi-relay") if kind == "relay" else "redis-server",
            "relays": len(pids) if kind == "relay" else None,
            "registered_per_relay": ([r.registered_here() for r in service.relays] if sharded
                                     else [size] if kind == "relay" else None),
            "cpu_s_per_relay": [round(b - a, 2) for a, b in zip(cpu_before, cpu_after)],
            "peak_rss_mib_per_relay": [round(p / 1024, 1) for p in peaks],
            "ranks": size,
            "clients_ok": len(worlds),
            "errors": len(errors),
            "first_error": errors[0]["error"] if errors else None,
            "connect_s": round(t_connected - t_connect, 3),
            "create_s": round(t_created - t0, 4),
            "full_world_s": round(worlds[-1] - t0, 3) if worlds else None,
            "first_world_s": round(worlds[0] - t0, 3) if worlds else None,
            "median_world_s": round(statistics.median(worlds) - t0, 3) if worlds else None,
            "service_world_s": round(stamps["world_seconds"], 3) if "world_seconds" in stamps else None,
            "published_after_last_join_s": since(stamps.get("world"), last_join),
            "last_world_after_last_join_s": since(worlds[-1] if worlds else None, last_join),
            "last_lookup_after_last_join_s": since(lookups[-1] if lookups else None, last_join),
            "world_bytes_per_rank": max(world_bytes) if world_bytes else None,
            "lookup_bytes_median": int(statistics.median(lookup_bytes)) if lookup_bytes else None,
            "lookups_per_rank": len(partners_of(0, size)),
            "register_median_ms": round(1000 * statistics.median(r["register_s"] for r in recs if "register_s" in r), 1)
            if worlds else None,
            "rss_before_mib": round(mem_before["VmRSS"] / 1024, 1),
            "peak_rss_mib": round(mem_after["VmHWM"] / 1024, 1),
            "redis_used_memory_peak_mib": round(redis_peak / 2**20, 1) if redis_peak else None,
            "clients": n,
        }
        return result
    finally:
        Path(stop_file).touch()
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
        try:
            if launcher is not None:
                if sharded:
                    launcher.end()
                elif kind == "relay":
                    from fmpi.wire.relay_protocol import Kind

                    launcher.send(Kind.END, {"job": job})
                    launcher.close()
                else:
                    launcher.end()
                    left = list(service.client.scan_iter(match="fmpi:*", count=1000))
                    if left:
                        print(f"warning: {len(left)} fmpi keys left in Redis after the job", file=sys.stderr)
        finally:
            service.stop()
            Path(stop_file).unlink(missing_ok=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024, help="simulated ranks (default %(default)s)")
    p.add_argument("--procs", type=int, default=4, help="client processes (threads per process = ranks / procs)")
    p.add_argument("--redis", action="store_true", help="also measure Redis (RedisJob/RedisRank, a local redis-server)")
    p.add_argument("--redis-only", action="store_true", help="measure Redis only")
    p.add_argument("--json", action="store_true", help="one JSON line per measurement as well")
    p.add_argument("--shards", type=int, default=1, metavar="K",
                   help="also measure the rendezvous sharded over K fmpi-relays (tcp://a,b,c; default 1: one relay only)")
    args = p.parse_args()
    need = 2 * args.ranks + 256  # per client process at most, but the launcher holds the other ends' pipes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    kinds = [] if args.redis_only else [("relay", 1)] + ([("relay", args.shards)] if args.shards > 1 else [])
    if args.redis or args.redis_only:
        kinds.append(("redis", 1))
    rows = []
    for kind, shards in kinds:
        r = measure(kind, args.ranks, args.procs, shards)
        rows.append(r)
        if args.json:
            print("SOAK-RENDEZVOUS " + json.dumps(r), flush=True)
    print()
    print(f"rendezvous of {args.ranks} simulated ranks ({args.procs} client processes, {os.cpu_count()} cores)")
    print()
    print("| service | ranks | ok | errors | service: published after last join | WORLD bytes / rank | "
          "LOOKUP answer (log2 N peers) | last join -> last WORLD | last join -> last lookup | CREATE -> last WORLD | "
          "first / median WORLD | register median | service RSS before | service peak RSS (VmHWM) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        extra = f" (Redis used_memory_peak {r['redis_used_memory_peak_mib']} MiB)" if r["redis_used_memory_peak_mib"] else ""
        print(f"| {r['service']} | {r['ranks']} | {r['clients_ok']} | {r['errors']} | "
              f"{r['published_after_last_join_s']} s | {r['world_bytes_per_rank'] or 'n/a '}B | "
              f"{r['lookup_bytes_median']} B ({r['lookups_per_rank']}) | {r['last_world_after_last_join_s']} s | "
              f"{r['last_lookup_after_last_join_s']} s | {r['full_world_s']} s | "
              f"{r['first_world_s']} / {r['median_world_s']} s | "
              f"{r['register_median_ms']} ms | {r['rss_before_mib']} MiB | {r['peak_rss_mib']} MiB{extra} |")
    if any(r["relays"] for r in rows):
        print()
        print("| relays | ranks | registrations per relay | published after last join | last join -> last lookup | "
              "CPU s per relay (CREATE -> last lookup) | peak RSS per relay |")
        print("|---:|---:|---|---:|---:|---|---|")
        for r in rows:
            if r["relays"]:
                print(f"| {r['relays']} | {r['ranks']} | {' / '.join(map(str, r['registered_per_relay']))} | "
                      f"{r['published_after_last_join_s']} s | {r['last_lookup_after_last_join_s']} s | "
                      f"{' / '.join(map(str, r['cpu_s_per_relay']))} | "
                      f"{' / '.join(f'{m} MiB' for m in r['peak_rss_mib_per_relay'])} |")
    for r in rows:
        if r["errors"]:
            print(f"{r['service']}: {r['errors']} clients failed, first: {r['first_error']}", file=sys.stderr)
    return 1 if any(r["errors"] or r["clients_ok"] != r["ranks"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
