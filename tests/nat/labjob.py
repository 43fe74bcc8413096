"""Run real fmpi jobs in the NAT lab: relay and launcher on the public side, one rank per lab host.

The relay host runs ``fmpi-relay`` and the launcher (``fmpirun --print-join
-v``); each rank is ``fmpirun --join ... python program.py`` inside its own
host namespace, behind that host's NAT gateway. The launcher's stderr holds
the link report fmpirun prints (one line per rank pair with ``-v``, and the
summary), which is what the tests assert on.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from natlab.topology import NatLab

BIN = Path(sys.executable).parent
FMPIRUN = str(BIN / "fmpirun")
RELAY_BIN = str(BIN / "fmpi-relay")
PROGRAMS = Path(__file__).resolve().parent / "programs"
RELAY_PORT = 7000

_LINK = re.compile(r"fmpirun: link (\d+)-(\d+): (direct|punched|relayed)(?:, set-up ([\d.]+) (ms|s))?(, failed over)?")
_SUMMARY = re.compile(r"fmpirun: links: (\d+) \((\d+) direct, (\d+) punched, (\d+) relayed\)")


@dataclass
class Proc:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


@dataclass
class JobRun:
    launcher: Proc
    ranks: list[Proc]
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # pair -> kind
    setup: dict[tuple[int, int], float] = field(default_factory=dict)  # pair -> seconds
    failed_over: set[tuple[int, int]] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"--- launcher (rc {self.launcher.returncode}) ---\n{self.launcher.stdout}{self.launcher.stderr}"]
        for r, p in enumerate(self.ranks):
            parts.append(f"--- rank {r} (rc {p.returncode}, {p.seconds:.1f}s) ---\n{p.stdout}{p.stderr}")
        return "\n".join(parts)


class LabJobs:
    """Starts the relay once; runs jobs on demand."""

    def __init__(self, lab: NatLab) -> None:
        self.lab = lab
        self.url = f"tcp://{lab.relay_ip}:{RELAY_PORT}"
        self.relay = self.start_relay()

    def start_relay(self, argv: Sequence[str] | None = None) -> subprocess.Popen:
        argv = list(argv or [RELAY_BIN, "--host", "0.0.0.0", "--port", str(RELAY_PORT), "--log-level", "WARNING"])
        proc = self.lab.popen(self.lab.RELAY, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = _readline(proc, 20)
        if "listening" not in line:
            raise AssertionError(f"the relay did not start: {line!r}")
        return proc

    def stop(self) -> None:
        for proc in (self.relay,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def start(
        self,
        hosts: Sequence[str],
        program: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        rank_env: Mapping[int, Mapping[str, str]] | None = None,
        url: str | None = None,
        per_rank_args: Sequence[Sequence[str]] | None = None,
    ) -> "RunningJob":
        """Create a job at the relay (`url`: another relay than the module's) and start rank r on hosts[r]."""
        n = len(hosts)
        url = url or self.url
        launcher = self.lab.popen(
            self.lab.RELAY,
            [FMPIRUN, "-n", str(n), "--relay", url, "--print-join", "-v", "--fill-timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        job_id = token = None
        end = time.monotonic() + 30
        while token is None:
            line = _readline(launcher, max(0.1, end - time.monotonic()))
            if not line:
                raise AssertionError(f"the launcher did not print the join line: {_collect(launcher, 0, 0).stderr}")
            m = re.search(r"FMPI_TOKEN=(\S+) fmpirun --join \S+ --job (\S+)", line)
            if m:
                token, job_id = m.group(1), m.group(2)
        ranks = []
        for r, host in enumerate(hosts):
            e = dict(os.environ)
            e.update(env or {})
            e.update((rank_env or {}).get(r, {}))
            e["FMPI_TOKEN"] = token
            argv = [FMPIRUN, "--join", url, "--job", job_id, "--size", str(n), "--rank", str(r),
                    "--fill-timeout", "60", sys.executable, str(PROGRAMS / program),
                    *(per_rank_args[r] if per_rank_args is not None else args)]
            ranks.append(self.lab.popen(host, argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        return RunningJob(launcher, ranks)

    def start_roles(self, hosts: Sequence[str], roles: Sequence[Sequence[str]], **kw) -> "RunningJob":
        """programs/faults.py on every host, rank r with the arguments roles[r]."""
        return self.start(hosts, "faults.py", per_rank_args=roles, **kw)

    def run(self, hosts: Sequence[str], program: str, args: Sequence[str] = (), timeout: float = 90, **kw) -> JobRun:
        return self.start(hosts, program, args, **kw).finish(timeout)


class RunningJob:
    def __init__(self, launcher: subprocess.Popen, ranks: list[subprocess.Popen]) -> None:
        self.launcher = launcher
        self.ranks = ranks
        self.started = time.monotonic()

    def wait_for_line(self, rank: int, text: str, timeout: float) -> str:
        """Read rank's stdout until a line containing `text` (the rest stays unread for finish())."""
        proc = self.ranks[rank]
        end = time.monotonic() + timeout
        while True:
            line = _readline(proc, max(0.0, end - time.monotonic()))
            if text in line:
                return line
            if not line:
                raise AssertionError(f"rank {rank} never printed {text!r}")

    def finish(self, timeout: float) -> JobRun:
        end = self.started + timeout
        ranks = [_collect(p, end, self.started) for p in self.ranks]
        launcher = _collect(self.launcher, max(end, time.monotonic() + 5), self.started)
        run = JobRun(launcher, ranks)
        for line in launcher.stderr.splitlines():
            m = _LINK.search(line)
            if m:
                pair = (int(m.group(1)), int(m.group(2)))
                run.links[pair] = m.group(3)
                if m.group(4):
                    run.setup[pair] = float(m.group(4)) / (1000 if m.group(5) == "ms" else 1)
                if m.group(6):
                    run.failed_over.add(pair)
            m = _SUMMARY.search(line)
            if m:
                run.counts = {"direct": int(m.group(2)), "punched": int(m.group(3)), "relayed": int(m.group(4))}
        return run


def _collect(proc: subprocess.Popen, end: float, started: float) -> Proc:
    try:
        out, err = proc.communicate(timeout=max(0.1, end - time.monotonic()))
        note = ""
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        note = "\n[killed by the test: timeout]"
    text = _seen.pop(proc.pid, b"") + _pending.pop(proc.pid, b"") + (out or b"")
    return Proc(proc.returncode, text.decode(errors="replace"), (err or b"").decode(errors="replace") + note,
                time.monotonic() - started)


# Per process: lines already handed out, and bytes read past them (both end up in _collect's output).
_seen: dict[int, bytes] = {}
_pending: dict[int, bytes] = {}


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    """One line of stdout, or '' on EOF/timeout; reads with os.read so select() sees everything."""
    fd = proc.stdout.fileno()
    buf = _pending.get(proc.pid, b"")
    end = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                _pending[proc.pid] = buf
                return ""
            chunk = os.read(fd, 65536)
            if not chunk:
                _pending[proc.pid] = buf
                return ""
            buf += chunk
    line, rest = buf.split(b"\n", 1)
    _pending[proc.pid] = rest
    _seen[proc.pid] = _seen.get(proc.pid, b"") + line + b"\n"
    return line.decode(errors="replace") + "\n"
