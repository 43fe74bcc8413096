"""Helpers shared by the natpunch tests and their fixtures (see conftest.py).

Lab processes speak JSON lines; ``JsonProc`` reads them with real timeouts,
``Agents`` drives ``punch_agent.py`` ranks.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS_DIR = HERE.parent
SRC_DIR = TESTS_DIR.parent / "src"
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from natlab.topology import NatLab  # noqa: E402

NETTOOL = str(HERE / "nettool.py")
AGENT = str(HERE / "punch_agent.py")
OBSERVER_PORTS = (7000, 7001)


def child_env() -> dict[str, str]:
    """Environment for lab processes: the in-repo package importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class JsonProc:
    """A lab process speaking JSON lines on stdin/stdout.

    Reads with a selector and os.read (no threads, no Python-level line
    buffering hiding data from select), so every read has a real timeout.
    """

    def __init__(self, proc: subprocess.Popen[bytes], label: str) -> None:
        self.proc = proc
        self.label = label
        self._buf = b""

    def read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = end - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    raise AssertionError(f"{self.label}: no output within {timeout}s"
                                         f"{self._stderr_tail()}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"{self.label}: exited ({self.proc.poll()}) "
                                         f"before answering{self._stderr_tail()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, obj: object) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(f"{self.label}: died{self._stderr_tail()}") from None

    def _stderr_tail(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        try:
            err = self.proc.stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        return f"\n--- stderr of {self.label} ---\n{err[-3000:]}"

    def stop(self, grace: float = 2.0) -> None:
        """Ask politely (``quit`` line), kill after *grace* seconds."""
        if self.proc.poll() is None:
            try:
                if grace <= 0:
                    raise OSError("no grace")
                self.send("quit")
                self.proc.wait(timeout=grace)
            except (AssertionError, subprocess.TimeoutExpired, OSError, ValueError):
                self.proc.kill()
                self.proc.wait()


def spawn_json(lab: NatLab, host: str, args: list[str], label: str) -> JsonProc:
    proc = lab.python(host, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, env=child_env())
    return JsonProc(proc, label)


class Agent:
    """One punch_agent.py rank, after it learned its endpoints."""

    def __init__(self, jp: JsonProc, host: str, name: str, port: int) -> None:
        self.jp, self.host, self.name, self.port = jp, host, name, port
        self.public: tuple[str, int] | None = None
        self.lan: tuple[str, int] | None = None

    @property
    def candidates(self) -> list[list[object]]:
        """What a rank would publish through the relay: LAN, then public."""
        assert self.lan and self.public
        return [list(self.lan), list(self.public)]


class Agents:
    def __init__(self, lab: NatLab) -> None:
        self.lab = lab
        self.all: list[Agent] = []

    def spawn(self, *hosts: str) -> list[Agent]:
        """Start one agent per host (same name as the host), learn endpoints."""
        started = []
        for host in hosts:
            port = self.lab.fresh_port()
            jp = spawn_json(self.lab, host, [AGENT, "--name", host, "--port", str(port),
                                             "--relay", f"{self.lab.relay_ip}:{OBSERVER_PORTS[0]}"],
                            f"agent {host}")
            agent = Agent(jp, host, host, port)
            self.all.append(agent)
            started.append(agent)
        for agent in started:
            msg = agent.jp.read(10)
            assert msg["event"] == "endpoint", msg
            agent.public = (msg["public"][0], msg["public"][1])
            agent.lan = (msg["lan"][0], msg["lan"][1])
        return started

    def punch(self, pairs: list[tuple[Agent, Agent]], *, timeout: float = 3.0,
              delay: Mapping[str, float] | None = None,
              options: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """Tell every agent in *pairs* to punch its partners; collect results.

        Returns {agent name: result event}.  ``options`` may set per-agent
        ``listen``/``active``/``peers`` overrides.
        """
        peers: dict[str, dict[str, list[list[object]]]] = {}
        involved: dict[str, Agent] = {}
        for a, b in pairs:
            peers.setdefault(a.name, {})[b.name] = b.candidates
            peers.setdefault(b.name, {})[a.name] = a.candidates
            involved[a.name], involved[b.name] = a, b
        for name, agent in involved.items():
            cmd: dict[str, Any] = {"peers": peers[name], "timeout": timeout,
                                   "delay": (delay or {}).get(name, 0.0)}
            cmd.update((options or {}).get(name, {}))
            agent.jp.send(cmd)
        wait = timeout + max((delay or {}).values(), default=0.0) + 10.0
        results = {}
        for name, agent in involved.items():
            msg = agent.jp.read(wait)
            assert msg["event"] == "result", msg
            results[name] = msg
        return results

    def stop(self) -> None:
        for agent in self.all:
            agent.jp.stop()


