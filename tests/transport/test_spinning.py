"""Spin-then-sleep in blocking waits (transport/spinning.py): when it spins, and that it stops."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time

import pytest

from fmpi.transport.options import TransportOptions
from fmpi.transport.spinning import DEFAULT_SPIN, MISSES, SpinBudget, default_spin, spin_poll


def _cpu_max(tmp_path, text: str) -> str:
    path = tmp_path / "cpu.max"
    path.write_text(text)
    return str(path)


def test_spin_only_with_a_whole_cpu(tmp_path):
    unlimited = _cpu_max(tmp_path, "max 100000\n")
    assert default_spin({}, unlimited) == DEFAULT_SPIN
    assert default_spin({}, str(tmp_path / "absent")) == DEFAULT_SPIN  # no cgroup v2: nothing limits us
    assert default_spin({}, _cpu_max(tmp_path, "50000 100000\n")) == 0.0  # half a CPU
    assert default_spin({}, _cpu_max(tmp_path, "200000 100000\n")) == DEFAULT_SPIN
    # A Lambda function below 1769 MB gets a fraction of a vCPU.
    assert default_spin({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024"}, unlimited) == 0.0
    assert default_spin({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1769"}, unlimited) == DEFAULT_SPIN


def test_fmpi_spin_us_sets_or_disables_the_spin():
    assert TransportOptions.from_env({"FMPI_SPIN_US": "0"}).spin == 0.0
    assert TransportOptions.from_env({"FMPI_SPIN_US": "250"}).spin == pytest.approx(250e-6)
    with pytest.raises(ValueError, match="FMPI_SPIN_US must be a number of microseconds, not 'fast'"):
        TransportOptions.from_env({"FMPI_SPIN_US": "fast"})
    with pytest.raises(ValueError, match="FMPI_SPIN_US must be 0 or more microseconds"):
        TransportOptions.from_env({"FMPI_SPIN_US": "-5"})


def test_spinning_stops_after_misses_and_resumes_when_a_spin_would_have_caught():
    budget = SpinBudget(50e-6)
    for _ in range(MISSES):
        assert budget.next_spin() == 50e-6
        budget.missed()
    assert budget.next_spin() == 0.0  # a peer that computes for long: only sleep from now on
    budget.slept(1.0)
    assert budget.next_spin() == 0.0
    budget.slept(10e-6)  # that wait ended within the spin time: spinning pays again
    assert budget.next_spin() == 50e-6
    assert SpinBudget(0.0).next_spin() == 0.0


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_spin_poll_catches_data_stops_spinning_after_misses_and_sleeps_out_its_timeout(pair):
    a, b = pair
    poller = select.poll()
    poller.register(b.fileno(), select.POLLIN)
    start = time.monotonic()
    assert spin_poll(poller, 200, SpinBudget(0.005)) == []  # spun 5 ms, then slept the 200 ms out
    assert time.monotonic() - start >= 0.2
    budget = SpinBudget(0.002)
    for _ in range(MISSES):
        assert spin_poll(poller, 0, budget) == []
    assert budget.next_spin() == 0.0
    a.send(b"x")
    assert spin_poll(poller, None, budget) == [(b.fileno(), select.POLLIN)]  # slept, but not for long
    assert budget.next_spin() == 0.002


def test_no_spin_budget_goes_straight_to_sleep(pair):
    a, b = pair
    poller = select.poll()
    poller.register(b.fileno(), select.POLLIN)
    budget = SpinBudget(0.0)
    a.send(b"x")
    assert spin_poll(poller, None, budget) == [(b.fileno(), select.POLLIN)]


def test_fmpi_spin_yield_is_0_or_1():
    assert TransportOptions.from_env({}).spin_yield is False
    assert TransportOptions.from_env({"FMPI_SPIN_YIELD": "1"}).spin_yield is True
    assert TransportOptions.from_env({"FMPI_SPIN_YIELD": "0"}).spin_yield is False
    with pytest.raises(ValueError, match="FMPI_SPIN_YIELD must be 0 or 1 .*not 'yes'"):
        TransportOptions.from_env({"FMPI_SPIN_YIELD": "yes"})


# A process pinned to one core beside a busy process on that core spins for a while without
# anything arriving and reports the share of the core it took, yielding or not.
_SHARE_OF_CORE = """
import os, select, socket, sys, time
from fmpi.transport.spinning import SpinBudget, spin_poll
core = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})
busy = os.fork()
if busy == 0:
    while True:
        pass
try:
    a, b = socket.socketpair()
    poller = select.poll()
    poller.register(b.fileno(), select.POLLIN)
    shares = []
    for yielding in (False, True) * 4:  # interleaved: other load on the machine hits both alike
        start, cpu = time.monotonic(), time.thread_time()
        assert spin_poll(poller, 0, SpinBudget(0.2, yielding)) == []
        shares.append((time.thread_time() - cpu) / (time.monotonic() - start))
    median = lambda xs: sorted(xs)[len(xs) // 2]
    print(median(shares[0::2]), median(shares[1::2]))
finally:
    os.kill(busy, 9)
    os.waitpid(busy, 0)
"""


def test_a_yielding_spin_leaves_its_core_to_a_process_with_work():
    out = subprocess.run([sys.executable, "-c", _SHARE_OF_CORE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    plain, yielding = map(float, out.stdout.split())
    # Beside a busy process a plain spin gets its fair share of the core (about half on a quiet machine,
    # less when other work shares it too); a yielding one hands nearly all of it over and runs only when
    # the other's turn ends. Medians of interleaved rounds, compared with each other.
    assert plain > 0.02, "the spin never ran: nothing measured"
    assert yielding < plain / 2
