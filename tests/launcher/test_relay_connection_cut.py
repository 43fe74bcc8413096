"""A local job (fmpirun's embedded relay) survives one rank's relay connection being cut: the rank reconnects.

The embedded relay cannot restart without its launcher (ranks get
FMPI_RELAY_REJOIN=0), but a connection cut while it runs is another matter:
``ss -K`` aborts a rank's sockets to fmpirun's relay port (root: CAP_NET_ADMIN).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests_support import fmpirun_argv

RING = Path(__file__).resolve().parents[1] / "nat" / "programs" / "ring_until.py"


def _established(pid: int) -> list[tuple[int, int]]:
    """(local port, peer port) of the established TCP connections of process `pid`."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True, check=True).stdout
    return [(int(cols[2].rsplit(":", 1)[1]), int(cols[3].rsplit(":", 1)[1]))
            for cols in (line.split() for line in out.splitlines() if f"pid={pid}," in line)]


def _listening(pid: int) -> set[int]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if f"pid={pid}," in line}


@pytest.mark.skipif(os.geteuid() != 0, reason="ss -K needs CAP_NET_ADMIN")
@pytest.mark.parametrize("channel", ["auto", "relay"])
def test_a_local_rank_whose_relay_connection_is_cut_reconnects(tmp_path, channel):
    stop = tmp_path / "stop"
    proc = subprocess.Popen(fmpirun_argv("-n", "3", "-v", "--channel", channel, sys.executable, str(RING), str(stop)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        ranks: list[int] = []
        relay_ports: set[int] = set()
        cut: list[tuple[int, int]] = []
        while not cut and time.monotonic() < deadline:  # (until rank 1 of the ranks has its relay connection)
            time.sleep(0.5)
            ranks = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
            relay_ports = _listening(proc.pid)
            cut = [c for c in _established(ranks[1]) if c[1] in relay_ports] if len(ranks) == 3 else []
        assert cut, "no relay connection of a rank to cut"
        time.sleep(1.0)  # (streaming)
        for local, peer in cut:
            subprocess.run(["ss", "-K", "-tn", "sport", "=", str(local), "dport", "=", str(peer)], check=True,
                           capture_output=True)
        time.sleep(1.0)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    results = re.findall(r"rank (\d) ok (\d+) (\d+)", out)
    assert len(results) == 3 and len({r[1:] for r in results}) == 1, out  # every rank: the same rounds and sums
    assert "reconnected to the relay at" in err and "(the relay had stayed up)" in err, err
    assert re.search(r"fmpirun: rank \d reconnected to the relay after [\d.]+ s", err), err
