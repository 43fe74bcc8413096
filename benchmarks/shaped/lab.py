"""A network shaped like Lambda's: N hosts in network namespaces, each with one-way latency and a rate cap.

Built on the NAT lab (tests/natlab/topology.py): every host is a namespace on
the lab's "internet" bridge (public, or behind its own cone NAT), and the relay
host is one of them. Each host, the relay included, gets:

- **latency**: its outgoing packets wait ``delay_us`` in an NFQUEUE consumer
  (``nfqueue_delay.py``, one process per host), so a packet from A to B
  arrives one ``delay`` late and a round trip takes two: this kernel has no
  ``netem``;
- **bandwidth**: a token bucket (``tc tbf``) on each direction of its link,
  ``rate`` sustained after a ``burst`` at the veth's own speed: what it sends
  on its ``eth0``, what it receives on the bridge port facing it.

What it does not model: loss, jitter beyond the delayer's own (measured in
``probe``), a shared bottleneck inside the network (only each host's own link
is capped), a function's CPU (every host shares this machine's two cores), and
Lambda's NAT (unless ``nat="cone"``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "nat")]

from natlab.topology import NatLab, _run, cleanup_stale, natlab_available  # noqa: E402

DELAYER = HERE / "nfqueue_delay.py"


@dataclass(frozen=True)
class Shape:
    """One host's network: one-way latency and a token bucket (Lambda inside one region by default)."""

    delay_us: float = 150.0
    rate_mbit: float = 620.0
    burst_kb: int = 256  # bytes that pass at line rate before the rate holds (tbf's bucket)

    @property
    def alpha(self) -> float:
        """One-way latency, seconds."""
        return self.delay_us * 1e-6

    @property
    def beta(self) -> float:
        """Seconds per byte at the sustained rate (0: not capped)."""
        return 8 / (self.rate_mbit * 1e6) if self.rate_mbit > 0 else 0.0

    def describe(self) -> str:
        return f"{self.delay_us:g} µs one way, {self.rate_mbit:g} Mbit/s after a {self.burst_kb} KB burst"


class ShapedLab:
    """A NatLab whose hosts are shaped; a context manager. ``hosts`` are the rank hosts, in rank order."""

    def __init__(self, n: int, shape: Shape, nat: str = "none") -> None:
        self.shape = shape
        self.nat = nat
        self.n = n
        self.lab = NatLab()
        self.hosts = [f"r{i}" for i in range(n)]
        self._delayers: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> ShapedLab:
        ok, reason = natlab_available()
        if not ok:
            raise SystemExit(f"cannot build the lab: {reason}")
        cleanup_stale()
        self.lab.__enter__()
        try:
            for host in self.hosts:
                self.lab.add_host(host, self.nat)
            for host in [self.lab.RELAY, *self.hosts]:
                self.shape_host(host)
        except BaseException:
            self.lab.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delayer_stats()
        self.lab.close()

    def shape_host(self, host: str) -> None:
        """Give `host` (already in the lab) the shape: its delayer, its rule, its token buckets."""
        ns = self.lab.ns(host)
        if self.shape.delay_us > 0:
            _run(["ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", "0"])
            proc = self.lab.popen(host, [sys.executable, str(DELAYER), "--delay-us", str(self.shape.delay_us)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the delayer in {host} did not start: {proc.stderr.read()}")
            self._delayers[host] = proc
        if self.shape.rate_mbit > 0:
            tbf = ["tbf", "rate", f"{self.shape.rate_mbit}mbit", "burst", f"{self.shape.burst_kb}kb", "latency", "100ms"]
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", *tbf])
            _run(["tc", "-n", self.lab.inet_ns, "qdisc", "replace", "dev", self._bridge_port(ns), "root", *tbf])

    def _bridge_port(self, ns: str) -> str:
        """The bridge port (in the internet namespace) whose veth peer is `ns`'s eth0."""
        peer = json.loads(_run(["ip", "-n", ns, "-j", "link", "show", "eth0"]).stdout)[0]["link_index"]
        ports = json.loads(_run(["ip", "-n", self.lab.inet_ns, "-j", "link", "show"]).stdout)
        return next(p["ifname"] for p in ports if p["ifindex"] == peer)

    def ip(self, host: str) -> str:
        return self.lab.lan_ip(host)

    def delayer_stats(self) -> dict[str, dict]:
        """Stop the delayers; {host: their counters} (packets, CPU, how late they released)."""
        stats = {}
        for host, proc in self._delayers.items():
            proc.terminate()
            try:
                out, _ = proc.communicate(timeout=10)
                stats[host] = json.loads(out.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError):
                proc.kill()
        self._delayers.clear()
        return stats
