"""Spin-then-sleep: a waiting thread polls its links for a few microseconds before it sleeps.

Waking a thread that sleeps in ``poll`` costs 15-30 µs on a virtual machine,
more than a small message's whole trip through fmpi; a bare Python socket
ping-pong drops from ~25 µs to ~3 µs per half round trip when the receiver
polls instead of sleeping. So a blocking wait first polls (``poll(0)``) for
up to ``spin`` seconds, and sleeps only if nothing came by then.

Spinning burns the CPU it waits on, which is only worth it when the rank has
a CPU of its own and the answer is about to come. Hence:

* the default is decided by ``default_spin``: no spin when the process may
  use less than one CPU (a cgroup quota, a Lambda function smaller than one
  vCPU: its quota would be spent polling, with nothing to yield to);
* when the launcher put more ranks than cores on the machine, fmpirun has
  the waits *yield* instead (``FMPI_SPIN_YIELD=1``, with a longer spin):
  between two polls the rank calls ``sched_yield``, which hands its core to
  a rank that has work (often the very peer it waits for) and returns at
  once when there is none. Sleeping instead costs every message a wake-up,
  and the woken rank preempts the sender in the middle of its ``sendmsg``:
  at four ranks on two cores a 1-element allreduce took 20-35 % longer that
  way than with yielding waits;
* ``SpinBudget`` stops spinning after ``MISSES`` spins in a row that caught
  nothing (a rank waiting on a peer that computes for seconds spins at most
  ``MISSES * spin`` before it only sleeps) and starts again when a wait ends
  within the spin time, i.e. when spinning would have caught it.
"""

from __future__ import annotations

import os
import time
from typing import Mapping

#: Default spin when the rank has a CPU to itself. A peer's fmpi turns a
#: message around in 20-40 µs; the spin must outlast that to catch the reply.
DEFAULT_SPIN = 100e-6
#: Spins in a row that caught nothing before waits only sleep.
MISSES = 8
#: A Lambda function gets one full vCPU at this much memory (AWS documentation).
LAMBDA_ONE_VCPU_MB = 1769


def default_spin(env: Mapping[str, str] | None = None, cpu_max: str = "/sys/fs/cgroup/cpu.max") -> float:
    """DEFAULT_SPIN when this process can use at least one whole CPU, else 0."""
    env = os.environ if env is None else env
    memory = env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "").strip()
    if memory.isdigit() and int(memory) < LAMBDA_ONE_VCPU_MB:
        return 0.0
    if _cgroup_cpus(cpu_max) < 1.0:
        return 0.0
    return DEFAULT_SPIN


def _cgroup_cpus(path: str) -> float:
    """CPUs the cgroup quota allows ("max": unlimited), inf when there is no cgroup v2 file."""
    try:
        with open(path) as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return float("inf")
    if quota == "max":
        return float("inf")
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return float("inf")


class SpinBudget:
    """How long the next wait may spin, learning from how recent waits ended (one per engine)."""

    def __init__(self, spin: float, yielding: bool = False) -> None:
        self.spin = spin
        self.yielding = yielding  # sched_yield between polls
        self._misses = 0

    def next_spin(self) -> float:
        """Seconds the next poll may spin (0: sleep at once)."""
        return self.spin if self._misses < MISSES else 0.0

    def caught(self) -> None:
        self._misses = 0

    def missed(self) -> None:
        self._misses += 1

    def slept(self, seconds: float) -> None:
        """A wait that did not spin slept this long: had it spun, would that have caught it?"""
        if seconds <= self.spin:
            self._misses = 0


def spin_poll(poller: "object", ms: int | None, budget: SpinBudget) -> list[tuple[int, int]]:
    """``poller.poll(ms)``, but polling without sleeping for up to the budget's spin first."""
    spin = budget.spin if budget._misses < MISSES else 0.0  # (``next_spin`` inline: once per wait)
    if spin <= 0.0:
        if budget.spin <= 0.0:
            return poller.poll(ms)  # type: ignore[attr-defined]
        start = time.perf_counter()
        events = poller.poll(ms)  # type: ignore[attr-defined]
        budget.slept(time.perf_counter() - start)
        return events
    end = time.perf_counter() + spin
    yielding = budget.yielding
    while True:
        events = poller.poll(0)  # type: ignore[attr-defined]
        if events:
            budget.caught()
            return events
        if time.perf_counter() >= end:
            budget.missed()
            return poller.poll(ms)  # type: ignore[attr-defined]
        if yielding:
            os.sched_yield()
