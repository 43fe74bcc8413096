"""fmpi-lambda-local's network: no inbound connection reaches a function, as on Lambda, yet ranks punch their links.

Real namespaces, a real firewall and NAT (``fmpi.lambda_local.function_network``),
and the shipped ``fmpi-lambda-local`` command with a real ``fmpirun`` against it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lambda_testing import FMPIRUN, PROGRAMS, aws_env

from fmpi.lambda_local import function_network
from fmpi.lambda_local.function_network import HOST_IP, PRIVATE_IP, FunctionNetwork

pytestmark = pytest.mark.natlab

LISTEN = "import socket; s = socket.create_server(('0.0.0.0', 7000)); print('up', flush=True); s.accept()"


@pytest.fixture
def network():
    ok, why = function_network.available()
    if not ok:
        pytest.skip(f"function networks: {why}")
    net = FunctionNetwork().start()
    try:
        yield net
    finally:
        net.close()


def _in(ns: str, code: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=30, check=False, **kw)


def test_a_function_takes_no_inbound_connection_and_leaves_through_its_nat(network):
    a, b = network.acquire(), network.acquire()
    public_a = network._in_use[a]
    listener = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-c", LISTEN],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "up"
        connect = f"import socket; socket.create_connection(('{public_a}', 7000), timeout=2); print('connected')"
        from_b = _in(b, connect)
        assert "connected" not in from_b.stdout and "timed out" in from_b.stderr, from_b
        with pytest.raises(OSError):
            socket.create_connection((public_a, 7000), timeout=2)  # nor from the host
        # Outbound works, from the private address, seen from outside as the public one, port kept.
        with socket.create_server((HOST_IP, 0)) as server:
            port = server.getsockname()[1]
            out = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-c",
                                    (f"import socket; c = socket.create_connection(('{HOST_IP}', {port}), timeout=5);"
                                     "print(*c.getsockname(), flush=True); c.recv(1)")],
                                   stdout=subprocess.PIPE, text=True)
            conn, (seen_ip, seen_port) = server.accept()
            local_ip, local_port = out.stdout.readline().split()
            conn.close()
            out.wait(timeout=10)
        assert (local_ip, seen_ip) == (PRIVATE_IP, public_a)
        assert int(local_port) == seen_port
    finally:
        listener.kill()
        listener.wait()
    network.release(a)
    network.release(b)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    assert a not in listed.split() and b not in listed.split()


def test_ranks_on_fmpi_lambda_local_punch_their_links(tmp_path):
    ok, why = function_network.available()
    if not ok:
        pytest.skip(f"function networks: {why}")
    binary = Path(sys.executable).parent / "fmpi-lambda-local"
    emulator = subprocess.Popen([str(binary), "--port", "0", "--work-dir", str(tmp_path / "work")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = emulator.stdout.readline()
        assert first.startswith(f"fmpi-lambda-local: a Lambda endpoint on http://{HOST_IP}:"), first
        endpoint = first.split(" on ")[1].split()[0]
        banner = "".join(emulator.stdout.readline() for _ in range(6))
        assert "no inbound connections" in banner.split("not enforced here")[0], banner
        role = re.search(r"--role (\S+)", banner).group(1)
        env = aws_env(endpoint, tmp_path / "cache")
        run = subprocess.run([FMPIRUN, "--backend", "lambda", "-n", "4", "-v", "--role", role,
                              "--relay-listen", f"{HOST_IP}:0", "--timeout", "90", "--fill-timeout", "60",
                              "python", str(PROGRAMS / "ring_collectives.py"), "lab"],
                             env=env, capture_output=True, text=True, timeout=240, check=False)
    finally:
        emulator.send_signal(signal.SIGINT)
        _, err = emulator.communicate(timeout=60)
    assert run.returncode == 0, run.stderr
    assert "rank 0/4 token=6 bcast=['lab'] max=3 sum=10" in run.stdout, run.stdout
    links = re.search(r"links: (\d+) \((\d+) direct, (\d+) punched, (\d+) relayed\)", run.stderr)
    assert links, run.stderr
    total, direct, punched, relayed = map(int, links.groups())
    assert direct == 0 and punched > 0 and punched + relayed == total, run.stderr
    assert emulator.returncode == 0, err
    leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    assert function_network.NS_PREFIX not in leftovers, leftovers
    assert not os.path.exists(f"/sys/class/net/{function_network.BRIDGE}")
