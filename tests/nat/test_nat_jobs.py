"""Real fmpirun jobs whose ranks each sit behind their own NAT gateway, relay on the public side.

Link kinds are asserted from what fmpirun reports (``-v`` lists every rank
pair's channel; the last line sums them up), so these tests check the
visibility path end to end as well as the transport.
"""

from __future__ import annotations

import sys


from labjob import LabJobs, PROGRAMS, RELAY_PORT, _readline

LAB_HOSTS = {
    "c1": "cone", "c2": "cone", "c3": "cone", "c4": "cone",
    "s1": "symmetric", "s2": "symmetric", "s3": "symmetric", "s4": "symmetric",
    "p1": "none",
    "l1": "lan:c1",  # a second host on c1's LAN, behind the same NAT
}


def _ok(run, n: int) -> None:
    for r, proc in enumerate(run.ranks):
        assert proc.returncode == 0 and f"rank {r} ok" in proc.stdout, run.describe()
    assert run.launcher.returncode == 0, run.describe()
    assert len(run.links) == n * (n - 1) // 2, run.describe()  # every pair talked, one link each


def test_cone_nats_every_link_is_punched(nat_job: LabJobs):
    run = nat_job.run(["c1", "c2", "c3", "c4"], "exchange.py", ["1000000"])
    _ok(run, 4)
    assert set(run.links.values()) == {"punched"}, run.describe()
    assert run.counts == {"direct": 0, "punched": 6, "relayed": 0}


def test_cone_nats_punch_to_the_looked_up_records_of_the_peers_a_rank_talks_to_only(nat_job: LabJobs):
    # The world names no peer: each rank looks its neighbours up through the relay (the side asked to punch looks
    # up the asker), and punches to the addresses the records give.
    run = nat_job.run(["c1", "c2", "c3", "c4"], "ring_lookups.py")
    for r, proc in enumerate(run.ranks):
        assert proc.returncode == 0, run.describe()
        assert f"rank {r} ok looked up {','.join(map(str, sorted({(r - 1) % 4, (r + 1) % 4})))}" in proc.stdout
    assert set(run.links.values()) == {"punched"} and len(run.links) == 4, run.describe()


def test_symmetric_nats_are_detected_and_every_link_is_relayed_at_once(nat_job: LabJobs):
    run = nat_job.run(["s1", "s2", "s3", "s4"], "exchange.py", ["1000000"])
    _ok(run, 4)
    assert run.counts == {"direct": 0, "punched": 0, "relayed": 6}, run.describe()
    # no hole punch was even tried: set-up is one relay round trip, not a punch deadline
    assert max(run.setup.values()) < 1.0, run.setup


def test_without_nat_detection_punching_fails_within_its_deadline_then_relays(nat_job: LabJobs):
    lab = nat_job.lab
    port = RELAY_PORT + 10
    relay = lab.popen(lab.RELAY, [sys.executable, str(PROGRAMS.parent / "relay_noprobe.py"), str(port)],
                      stdout=__import__("subprocess").PIPE)
    try:
        assert "listening" in _readline(relay, 20)
        run = nat_job.run(["s1", "s2", "s3"], "exchange.py", env={"FMPI_PUNCH_TIMEOUT": "1"},
                          url=f"tcp://{lab.relay_ip}:{port}")
    finally:
        relay.kill()
        relay.wait()
    _ok(run, 3)
    assert run.counts == {"direct": 0, "punched": 0, "relayed": 3}, run.describe()
    assert all(0.9 < s < 2.5 for s in run.setup.values()), run.setup  # the 1 s punch deadline, then the relay


def test_mixed_cone_symmetric_public_and_lan(nat_job: LabJobs):
    #          0      1     2     3     4 (c1's LAN)
    hosts = ["c1", "c2", "s1", "p1", "l1"]
    run = nat_job.run(hosts, "exchange.py", ["200000"])
    _ok(run, 5)
    links = run.links
    assert links[(0, 1)] == "punched"  # cone - cone
    assert links[(1, 4)] == "punched"  # cone - cone (the other NAT)
    assert links[(0, 4)] == "direct"  # same LAN
    relayed = {pair for pair, kind in links.items() if kind == "relayed"}
    assert relayed == {(0, 2), (1, 2), (2, 4)}, run.describe()  # symmetric - cone, and only those
    for pair in [(0, 3), (1, 3), (2, 3), (3, 4)]:  # anyone - public: plain connect, or punch when the public side asked
        assert links[pair] in ("direct", "punched"), run.describe()


def test_a_link_that_dies_mid_run_fails_over_to_the_relay(nat_job: LabJobs):
    lab = nat_job.lab
    job = nat_job.start(["c3", "c4"], "stream.py", ["1500"], env={"FMPI_LINK_TIMEOUT": "2"})
    job.wait_for_line(0, "streaming", 60)
    # Black-hole everything between the two NATs (the relay still reaches both).
    other = lab.public_ip("c3")
    for rule in (["-s", other], ["-d", other]):
        lab.run("gw-c4", ["iptables", "-I", "FORWARD", *rule, "-j", "DROP"], check=True)
    try:
        run = job.finish(90)
    finally:
        for rule in (["-s", other], ["-d", other]):
            lab.run("gw-c4", ["iptables", "-D", "FORWARD", *rule, "-j", "DROP"])
    for r, proc in enumerate(run.ranks):
        assert proc.returncode == 0 and f"rank {r} ok" in proc.stdout, run.describe()
    assert run.links == {(0, 1): "relayed"} and run.failed_over == {(0, 1)}, run.describe()
