"""The soak benchmarks (benchmarks/soak/) still run and still check what they claim.

Default suite: a tiny messages_100k.py run (2k messages, N = 4) must report
zero lost / duplicated / out of order / corrupted, its checker must catch an
injected fault, and a 16-rank rendezvous_1024.py run must fill its world. The
slow stage runs the larger forms (20k messages at N = 8 over direct links and
over the relay, 256 simulated ranks against fmpi-relay and Redis).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests_support import REPO, fmpirun_argv

SOAK = REPO / "benchmarks" / "soak"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FMPI_CHANNEL", None)
    return env


def _messages(n: int, messages: int, *extra: str, fmpirun: tuple[str, ...] = (), timeout: float = 300):
    argv = fmpirun_argv("-n", str(n), *fmpirun, sys.executable, str(SOAK / "messages_100k.py"),
                        "--messages", str(messages), "--quiet", *extra)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env())
    results = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("SOAK-RESULT ")]
    assert len(results) == 1, f"no result line:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, results[0]


def _clean(proc, result: dict, n: int, messages: int) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result["ok"] and result["ranks"] == n
    assert result["sent"] == result["received"] == messages
    assert result["bytes_sent"] == result["bytes_received"] > 0
    for key in ("lost", "duplicated", "out_of_order", "bad_checksum", "bad_header"):
        assert result[key] == 0, (key, result)
    assert len(result["peak_rss_mib"]) == n and all(m > 0 for m in result["peak_rss_mib"])
    assert "| all | " in proc.stdout  # rank 0's table


def test_messages_soak_small():
    proc, result = _messages(4, 2000)
    _clean(proc, result, 4, 2000)


@pytest.mark.parametrize("fault, counter", [("swap", "out_of_order"), ("corrupt", "bad_checksum")])
def test_messages_soak_catches_injected_faults(fault, counter):
    proc, result = _messages(4, 600, "--fault", fault)
    assert proc.returncode != 0
    assert not result["ok"] and result[counter] >= 1, result


def _rendezvous(*args: str, timeout: float = 300) -> list[dict]:
    proc = subprocess.run([sys.executable, str(SOAK / "rendezvous_1024.py"), "--json", *args],
                          capture_output=True, text=True, timeout=timeout, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("SOAK-RENDEZVOUS ")]
    assert "| service |" in proc.stdout
    return rows


def _full(row: dict, ranks: int) -> None:
    assert row["ranks"] == row["clients_ok"] == ranks and row["errors"] == 0, row
    assert 0 < row["first_world_s"] <= row["full_world_s"]
    assert row["peak_rss_mib"] > 0


def test_rendezvous_small():
    (row,) = _rendezvous("--ranks", "16", "--procs", "1")
    assert row["service"] == "fmpi-relay"
    _full(row, 16)


def test_rendezvous_small_sharded():
    """--shards 3: one relay, then three; each of the three holds its third of the ranks (from its own log)."""
    one, three = _rendezvous("--ranks", "16", "--procs", "1", "--shards", "3")
    _full(one, 16)
    _full(three, 16)
    assert one["registered_per_relay"] == [16] and three["registered_per_relay"] == [6, 5, 5]
    assert len(three["cpu_s_per_relay"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["direct", "relay"])
def test_messages_soak_20k(channel):
    proc, result = _messages(8, 20_000, fmpirun=("-v", "--channel", channel), timeout=900)  # (-v: the links line)
    _clean(proc, result, 8, 20_000)
    assert f"28 {'relayed' if channel == 'relay' else 'direct'}" in proc.stderr.replace("(", "").replace(",", "")


@pytest.mark.slow
def test_rendezvous_256_relay_and_redis():
    rows = _rendezvous("--ranks", "256", "--procs", "2", "--redis", timeout=900)
    assert [r["service"] for r in rows] == ["fmpi-relay", "redis-server"]
    for row in rows:
        _full(row, 256)
