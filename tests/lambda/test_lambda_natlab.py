"""Fidelity: emulated Lambda ranks, each in its own network namespace behind its own NAT.

Real Lambda sandboxes accept no inbound connections: they sit behind a NAT
(port-restricted cone) and reach the world only outbound. Here every rank's
awslambdaric process runs inside a NAT-lab host (``tests/natlab``) behind a
``cone`` gateway that drops unsolicited inbound traffic, fmpirun and its
relay run on the lab's public relay host (198.18.0.1), and moto stays in the
test process, reached from the lab through a Unix-socket bridge.

* ``test_ranks_behind_nat_rendezvous``: joining, the world, output
  forwarding and the end of the job all work without a single inbound
  connection to a rank.
* ``test_messages_between_ranks_behind_nat``: ranks exchange messages, so
  their links must be hole-punched (or relayed), and fmpirun's link summary
  must show no plain connect.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fmpi.lambda_local import netbridge
from fmpi.lambda_local.netbridge import UnixToTcp
from lambda_testing import FMPIRUN, PROGRAMS, REPO, Run, aws_env

sys.path.insert(0, str(REPO / "tests"))
from natlab.topology import NatLab, cleanup_stale, natlab_available

pytestmark = pytest.mark.natlab

RANKS = 4


@pytest.fixture(scope="module")
def nat_lab():
    ok, reason = natlab_available()
    if not ok:
        pytest.skip(f"NAT lab unavailable: {reason}")
    cleanup_stale()
    with NatLab() as lab:
        for r in range(RANKS):
            lab.add_host(f"r{r}", "cone")
        yield lab


@pytest.fixture
def lab_fmpirun(nat_lab, moto, bundle_cache):  # (the cache holds the dependencies: the lab reaches no index)
    host, port = moto.endpoint_url.rsplit("/", 1)[-1].split(":")
    sock_dir = tempfile.mkdtemp(prefix="fmpi-nat-")  # short: Unix socket paths are limited to 108 bytes
    bridge = UnixToTcp(f"{sock_dir}/moto.sock", host, int(port))
    moto_port = nat_lab.fresh_port()
    forwarder = nat_lab.python("relay", [netbridge.__file__, str(moto_port), bridge.path],
                               stdout=subprocess.PIPE, text=True)
    assert forwarder.stdout.readline().strip() == "ready"
    # Every rank behind its own NAT; fmpirun's ping (rank -1) where rank 0 is.
    moto.faults.netns = lambda rank: nat_lab.ns(f"r{max(rank, 0)}") if rank < RANKS else None

    def run(n: int, program: Path, *args: str, extra: tuple[str, ...] = ()) -> Run:
        relay = f"{nat_lab.relay_ip}:{nat_lab.fresh_port()}"
        argv = [FMPIRUN, "--backend", "lambda", "-n", str(n), "--relay-listen", relay, "--role", moto.role_arn,
                "--timeout", "60", "--fill-timeout", "30", *extra, "python", str(program), *args]
        proc = nat_lab.popen("relay", argv, env=aws_env(f"http://127.0.0.1:{moto_port}", bundle_cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return Run(proc.returncode, out, err)

    try:
        yield run
    finally:
        forwarder.kill()
        forwarder.wait()
        bridge.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_ranks_behind_nat_rendezvous(lab_fmpirun, nat_lab):
    run = lab_fmpirun(RANKS, PROGRAMS / "whereami.py", nat_lab.relay_ip)
    assert run.returncode == 0, run.stderr
    where = dict(re.findall(rf"rank (\d) of {RANKS} at (\S+)", run.stdout))
    assert sorted(where) == [str(r) for r in range(RANKS)], run.stdout
    for rank, ip in where.items():
        assert ip == nat_lab.lan_ip(f"r{rank}")  # a private address behind the rank's own NAT
        assert ip != nat_lab.public_ip(f"r{rank}")


def test_messages_between_ranks_behind_nat(lab_fmpirun):
    run = lab_fmpirun(RANKS, PROGRAMS / "ring_collectives.py", "nat", extra=("--fill-timeout", "20", "-v"))
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == RANKS
    assert f"rank 0/{RANKS} token={sum(range(RANKS))}" in run.stdout
    # Behind NATs no link can be a plain connect: each was punched, or else relayed.
    # With -v fmpirun prints the summary whenever ranks reported links, and a ring reports some: always here.
    links = re.search(r"links: (\d+) \((\d+) direct, (\d+) punched, (\d+) relayed\)", run.stderr)
    assert links, run.stderr
    total, direct, punched, relayed = map(int, links.groups())
    assert direct == 0 and punched + relayed == total > 0, run.stderr
