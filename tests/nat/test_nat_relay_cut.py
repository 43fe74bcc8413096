"""One lost socket does not kill a healthy job: a rank whose relay connection is cut (the relay stays up) reconnects.

Ranks behind NATs stream messages around a ring (programs/ring_until.py:
sizes up to 600 kB, so a relayed frame spans several relay chunks and a cut
can fall inside one) while the test cuts a rank's connections to the relay:

* ``ss -K`` in the rank's namespace (the kernel aborts the socket; the relay
  gets a reset), the DSO connections of ``--channel relay`` included;
* ``ss -K`` in the relay's namespace (the relay's socket is aborted first);
* a reset from the rank's NAT gateway for its relay connection only: the
  rank's next packet gets a RST while the relay hears nothing (what a NAT
  that forgot its mapping does), so the rank is back before the relay knows
  the old connection is dead;
* ``conntrack -F`` on a symmetric gateway: the NAT forgets its mappings, the
  rank's next packet leaves from a new public port, and the relay's reset
  for that port is all the rank hears.

Every job must end with rc 0 and every message checked, on direct
(punched) links and on relayed ones.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from labjob import RELAY_PORT, JobRun, LabJobs, RunningJob

LAB_HOSTS = {"c1": "cone", "c2": "cone", "c3": "cone", "s1": "symmetric"}
HOSTS = ["c1", "c2", "c3"]


def _rank_side(lab, host: str) -> list[list[str]]:
    """Abort every connection from `host` to the relay's port, in the rank's namespace."""
    out = lab.run(host, ["ss", "-K", "-t", "dst", lab.relay_ip, "dport", "=", str(RELAY_PORT)], check=True).stdout
    assert "ESTAB" in out, f"no relay connection to cut on {host}: {out}"
    return []


def _relay_side(lab, host: str) -> list[list[str]]:
    """Abort the relay's end of every connection from `host`'s public address."""
    out = lab.run(lab.RELAY, ["ss", "-K", "-t", "dst", lab.public_ip(host), "sport", "=", str(RELAY_PORT)],
                  check=True).stdout
    assert "ESTAB" in out, f"no relay connection of {host} to cut: {out}"
    return []


def _gateway_reset(lab, host: str) -> list[list[str]]:
    """The gateway answers the rank's next packet on its relay connections with a reset; the relay hears nothing.
    Returns the iptables commands that undo it."""
    out = lab.run(host, ["ss", "-H", "-t", "-n", "state", "established", "dst", lab.relay_ip, "dport", "=",
                         str(RELAY_PORT)], check=True).stdout
    ports = sorted({int(m.group(1)) for m in re.finditer(r"\S+:(\d+)\s+\S+:\d+", out)})
    assert ports, f"no relay connection on {host}: {out}"
    undo = []
    for port in ports:
        rule = ["FORWARD", "-i", "lan0", "-p", "tcp", "--sport", str(port), "-d", lab.relay_ip,
                "--dport", str(RELAY_PORT), "-j", "REJECT", "--reject-with", "tcp-reset"]
        lab.run(f"gw-{host}", ["iptables", "-I", *rule], check=True)
        undo.append(["iptables", "-D", *rule])
    return undo


def _conntrack_flush(lab, host: str) -> list[list[str]]:
    """The rank's NAT gateway forgets every mapping (``conntrack`` from the conntrack package)."""
    lab.run(f"gw-{host}", ["conntrack", "-F"], check=True)
    return []


CUTS = {"rank side": _rank_side, "relay side": _relay_side, "gateway reset": _gateway_reset,
        "conntrack flush": _conntrack_flush}


def _run_with_cuts(nat_job: LabJobs, tmp_path: Path, channel: str, cuts: list[tuple[str, str]],
                   hosts: list[str] = HOSTS) -> JobRun:
    """Start the ring on `hosts`, make each cut ((how, host), ~0.7 s apart) while it streams, then stop it."""
    stop = tmp_path / f"stop-{time.monotonic_ns()}"
    job: RunningJob = nat_job.start(hosts, "ring_until.py", [str(stop)], env={"FMPI_CHANNEL": channel})
    undo: list[tuple[str, list[str]]] = []
    failed: AssertionError | None = None
    try:
        for r in range(len(hosts)):
            job.wait_for_line(r, "streaming", 60)
        for how, host in cuts:
            time.sleep(0.7)
            undo += [(f"gw-{host}", command) for command in CUTS[how](nat_job.lab, host)]
        time.sleep(1.0)  # (streaming on after the last cut)
    except AssertionError as exc:
        failed = exc
    finally:
        stop.touch()
        run = job.finish(120)
        for where, command in undo:
            nat_job.lab.run(where, command, check=True)
    assert failed is None, f"{failed}\n{run.describe()}"
    return run


def _exact(run: JobRun, cuts: list[tuple[str, str]], hosts: list[str] = HOSTS) -> None:
    """rc 0 everywhere, every rank checked every message and agrees on the rounds and the allreduce sum."""
    results = []
    for r, proc in enumerate(run.ranks):
        m = re.search(rf"rank {r} ok (\d+) (\d+)", proc.stdout)
        assert proc.returncode == 0 and m, run.describe()
        results.append((int(m.group(1)), int(m.group(2))))
    rounds, total = results[0]
    n = len(run.ranks)
    assert results == [(rounds, sum(n * i + n * (n - 1) // 2 for i in range(7, rounds, 8)))] * n, run.describe()
    assert run.launcher.returncode == 0, run.describe()
    for how, host in cuts:
        rank = hosts.index(host)
        assert "reconnected to the relay" in run.ranks[rank].stderr, run.describe()
    assert "is gone" not in run.describe() and not re.search(r"rank \d+ lost($| \()", run.launcher.stderr, re.M), run.describe()


@pytest.mark.parametrize("channel", ["auto", "relay"])
def test_a_rank_whose_relay_connection_is_cut_reconnects_and_the_job_ends_exact(nat_job: LabJobs, tmp_path, channel):
    cuts = [("rank side", "c2")]
    run = _run_with_cuts(nat_job, tmp_path, channel, cuts)
    _exact(run, cuts)
    assert "rank 1 reconnected to the relay" in run.launcher.stderr, run.describe()


def test_a_reset_the_relay_never_hears_is_survived_too(nat_job: LabJobs, tmp_path):
    cuts = [("gateway reset", "c3")]
    run = _run_with_cuts(nat_job, tmp_path, "relay", cuts)
    _exact(run, cuts)


def test_a_symmetric_nat_that_forgets_its_mappings_is_survived(nat_job: LabJobs, tmp_path):
    hosts, cuts = ["s1", "c1", "c2"], [("conntrack flush", "s1")]
    run = _run_with_cuts(nat_job, tmp_path, "auto", cuts, hosts)
    _exact(run, cuts, hosts)


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["auto", "relay"])
def test_five_cuts_in_one_job_every_way(nat_job: LabJobs, tmp_path, channel):
    cuts = [("rank side", "c2"), ("relay side", "c1"), ("gateway reset", "c3"), ("rank side", "c1"), ("relay side", "c2")]
    run = _run_with_cuts(nat_job, tmp_path, channel, cuts)
    _exact(run, cuts)
    assert run.launcher.stderr.count("reconnected to the relay") == len(cuts), run.describe()


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(5))
def test_a_cut_mid_stream_five_jobs_in_a_row(nat_job: LabJobs, tmp_path, attempt):
    cuts = [("rank side", HOSTS[attempt % 3])]
    run = _run_with_cuts(nat_job, tmp_path, ["auto", "relay"][attempt % 2], cuts)
    _exact(run, cuts)
