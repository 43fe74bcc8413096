"""benchmarks/netlab.py: the shaped lab delays and caps for real, and fmpi and MPICH both run across it.

Needs root and network namespaces (as the NAT lab tests do): skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests_support import REPO

sys.path[:0] = [str(REPO / "benchmarks" / "shaped"), str(REPO / "tests")]

from natlab.topology import natlab_available  # noqa: E402

pytestmark = pytest.mark.natlab
NETLAB = REPO / "benchmarks" / "netlab.py"


@pytest.fixture(scope="module", autouse=True)
def lab_required() -> None:
    ok, reason = natlab_available()
    if not ok:
        pytest.skip(f"NAT lab unavailable: {reason}")


def _probe(*shape: str) -> dict:
    proc = subprocess.run([sys.executable, str(NETLAB), "--probe", "--ns", "2", *shape],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_shaping_delays_every_packet_and_caps_the_rate():
    """2 ms one way and 100 Mbit/s: a round trip takes at least ~4 ms and a stream stays under the cap.
    (Unshaped, the same probe's round trip is about 0.07 ms and a stream runs at 3 Gbit/s or more.)"""
    shaped = _probe("--delay-us", "2000", "--rate-mbit", "100", "--burst-kb", "256")["probe"]
    assert shaped["rtt_us"]["p10"] >= 3500, shaped  # two 2 ms holds (a release may be aimed a little early)
    assert shaped["rtt_us"]["median"] < 40_000, shaped  # and not far more, even on a loaded machine
    assert 40 <= shaped["mbit_s"] <= 110, shaped


@pytest.mark.slow
def test_fmpi_and_mpich_both_run_on_the_shaped_hosts(tmp_path):
    out = tmp_path / "netlab.json"
    proc = subprocess.run(
        [sys.executable, str(NETLAB), "--ns", "2,3", "--quick", "--scale", "0.05", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cells = json.loads(out.read_text())["cells"]
    assert {(c["n"], c["coll"], c["bytes"]) for c in cells} == {
        (n, coll, b) for n in (2, 3) for coll, b in [("barrier", 0), ("allreduce", 8), ("allreduce", 1 << 20),
                                                     ("bcast", 1 << 20), ("alltoall", 1 << 20)]
    }
    for c in cells:
        assert c["fmpi_us"] > 0 and c["mpich_us"] > 0 and c["bound_us"] > 0, c
        # Nothing moves faster than the shaped wire allows (a tenth of the bound: burst and rounding).
        assert min(c["fmpi_us"], c["mpich_us"]) > 0.1 * c["bound_us"], c
    assert "| allreduce | 8 B |" in proc.stdout and "FMI (1 int) 0.98 ms" in proc.stdout
