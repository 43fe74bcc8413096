"""NAT type detection says what it found, and a rank whose NAT it could not classify does not slow its pairs.

The relay's probe port (a second port: a symmetric NAT maps a connection to
it to another public port) is filtered in some gateways here: everything from
the LAN to the relay but its main port is dropped, as a strict firewall would.
"""

from __future__ import annotations

import re

import pytest
from labjob import RELAY_PORT, LabJobs

LAB_HOSTS = {"c1": "cone", "c2": "cone", "s1": "symmetric", "s2": "symmetric", "p1": "none"}


@pytest.fixture
def filtered(nat_job: LabJobs):
    """filtered(host): the relay's probe port is unreachable from `host` (until the test ends)."""
    lab = nat_job.lab
    undo = []

    def apply(host: str) -> None:
        rule = ["FORWARD", "-i", "lan0", "-p", "tcp", "-d", lab.relay_ip, "!", "--dport", str(RELAY_PORT), "-j", "DROP"]
        lab.run(f"gw-{host}", ["iptables", "-I", *rule], check=True)
        undo.append((f"gw-{host}", ["iptables", "-D", *rule]))

    yield apply
    for where, command in undo:
        lab.run(where, command, check=True)


def _joined(run, rank: int) -> str:
    m = re.search(rf"fmpirun: rank {rank} joined \(\d+ of \d+\)(.*)", run.launcher.stderr)
    assert m, run.describe()
    return m.group(1)


def test_fmpirun_v_shows_each_ranks_nat_kind(nat_job: LabJobs):
    run = nat_job.run(["c1", "s1", "p1"], "exchange.py")
    assert all(p.returncode == 0 for p in run.ranks) and run.launcher.returncode == 0, run.describe()
    assert _joined(run, 0) == ", behind a cone NAT", run.describe()
    assert _joined(run, 1) == ", behind a symmetric NAT", run.describe()
    assert _joined(run, 2) == "", run.describe()  # (not behind a NAT: as every rank of a local job, nothing to say)
    assert "link 0-1: relayed" in run.launcher.stderr and "(symmetric NAT, neither end public)" in run.launcher.stderr


def test_a_filtered_probe_port_is_retried_reported_and_its_pairs_relay_within_2_s(nat_job: LabJobs, filtered):
    filtered("s1")
    filtered("c2")
    run = nat_job.run(["s1", "s2", "c1", "c2"], "exchange.py")
    assert all(p.returncode == 0 for p in run.ranks) and run.launcher.returncode == 0, run.describe()
    for rank in (0, 3):
        said = _joined(run, rank)
        assert said.startswith(", NAT kind unknown: the relay's probe port") and "3 tries" in said, run.describe()
    # s1 (symmetric, unknown) with anyone behind a NAT: a short punch, then the relay
    for pair in [(0, 1), (0, 2), (0, 3)]:
        assert run.links[pair] == "relayed", run.describe()
        assert run.setup[pair] < 2.0, run.describe()  # (before: the 3 s punch deadline, then the relay)
    # c2 (cone, unknown) with a cone rank: the short punch is enough
    assert run.links[(2, 3)] == "punched", run.describe()


def test_forced_punching_of_an_impossible_pair_says_why_without_suggesting_the_relay(nat_job: LabJobs):
    env = {"FMPI_CHANNEL": "punch", "FMPI_PUNCH_TIMEOUT": "1"}
    run = nat_job.start_roles(["s1", "s2"], [["send-to", "1"], ["send-to", "0"]], env=env).finish(60)
    errors = [line for p in run.ranks for line in p.stdout.splitlines() if "error after" in line]
    assert errors, run.describe()
    for line in errors:
        assert re.search(r"cannot reach rank \d: FMPI_CHANNEL=punch, but this rank and rank \d are behind symmetric "
                         r"NATs: a hole punch cannot work", line), line
        assert "relay" not in line.lower(), line
    assert run.launcher.returncode != 0
