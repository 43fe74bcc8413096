"""TCP simultaneous open through real (namespace + iptables) NATs.

Every rank is a real process (punch_agent.py) in its own lab host.  It
learns its public endpoint from the observer in the relay namespace over a
connection from the shared local port -- the way the real relay will tell
it -- and then punches with ``fmpi.natpunch.simultaneous_open.punch_many``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest
from labtools import SRC_DIR, Agents

LAB_HOSTS = {
    "c1": "cone", "c2": "cone", "c3": "cone", "c4": "cone",
    "c1b": "lan:c1",          # second host on c1's LAN (same NAT)
    "p1": "none", "p2": "none",
    "s1": "symmetric", "s2": "symmetric",
}
TIMEOUT = 3.0
# Generous upper bound for a successful punch in the lab (really: ms).
FAST = 1.5


def check_pair(res: dict, a: str, b: str) -> None:
    """Both directions connected and each side read the other's hello."""
    ra, rb = res[a]["peers"][b], res[b]["peers"][a]
    assert ra["ok"], ra["reason"]
    assert rb["ok"], rb["reason"]
    assert ra["got"] == f"hello from {b} to {a}", ra
    assert rb["got"] == f"hello from {a} to {b}", rb
    for r in (ra, rb):
        assert r["blocking"] is True and r["nodelay"] is True
        assert r["elapsed"] < FAST, r


def test_cone_cone(agents: Agents) -> None:
    c1, c2 = agents.spawn("c1", "c2")
    # port-preserving NAT: public port == local port, public ip == gateway
    assert c1.public == (agents.lab.gateway_ip("c1"), c1.port)
    assert c2.public == (agents.lab.gateway_ip("c2"), c2.port)
    res = agents.punch([(c1, c2)], timeout=TIMEOUT)
    check_pair(res, "c1", "c2")
    # the connection runs between the two NATs' public endpoints
    assert tuple(res["c1"]["peers"]["c2"]["remote"]) == c2.public
    assert tuple(res["c2"]["peers"]["c1"]["remote"]) == c1.public
    assert res["c1"]["peers"]["c2"]["local"][1] == c1.port


@pytest.mark.parametrize("late", ["c1", "c2"])
def test_cone_cone_staggered_start(agents: Agents, late: str) -> None:
    """One side starts 0.6 s late: the early side's SYNs die at the late
    side's NAT, but its own NAT mapping lets the late side's SYN in."""
    c1, c2 = agents.spawn("c1", "c2")
    res = agents.punch([(c1, c2)], timeout=TIMEOUT, delay={late: 0.6})
    ra, rb = res["c1"]["peers"]["c2"], res["c2"]["peers"]["c1"]
    assert ra["ok"], ra["reason"]
    assert rb["ok"], rb["reason"]
    assert ra["got"] and rb["got"]
    early = "c2" if late == "c1" else "c1"
    # the early side waited for the late one, nothing more
    assert 0.5 < res[early]["punch_time"] < 0.6 + FAST


def test_cone_public(agents: Agents) -> None:
    c1, p1 = agents.spawn("c1", "p1")
    assert p1.public == p1.lan == (agents.lab.lan_ip("p1"), p1.port)
    res = agents.punch([(c1, p1)], timeout=TIMEOUT)
    check_pair(res, "c1", "p1")


def test_public_public(agents: Agents) -> None:
    p1, p2 = agents.spawn("p1", "p2")
    res = agents.punch([(p1, p2)], timeout=TIMEOUT)
    check_pair(res, "p1", "p2")


def test_public_public_late_peer_refused_then_retried(agents: Agents) -> None:
    """p2 starts 0.5 s late: p1's SYNs get RST (ECONNREFUSED) until p2's
    attempt exists; the jittered retry must then connect."""
    p1, p2 = agents.spawn("p1", "p2")
    res = agents.punch([(p1, p2)], timeout=TIMEOUT, delay={"p2": 0.5})
    r1 = res["p1"]["peers"]["p2"]
    assert r1["ok"], r1["reason"]
    assert r1["attempts"] >= 2          # refused at least once, retried
    assert res["p2"]["peers"]["p1"]["ok"]
    assert res["p1"]["punch_time"] < 0.5 + FAST


def test_same_lan_peers_connect_directly(agents: Agents) -> None:
    """Two hosts behind the same NAT: the LAN candidate connects (the NAT
    does not hairpin, its public address answers RST)."""
    c1, c1b = agents.spawn("c1", "c1b")
    assert c1.public[0] == c1b.public[0]
    res = agents.punch([(c1, c1b)], timeout=TIMEOUT)
    check_pair(res, "c1", "c1b")
    assert tuple(res["c1"]["peers"]["c1b"]["remote"]) == c1b.lan


def test_symmetric_symmetric_fails_within_deadline(agents: Agents) -> None:
    s1, s2 = agents.spawn("s1", "s2")
    # symmetric NAT: the relay saw a random port, not the local one
    assert s1.public[1] != s1.port or s2.public[1] != s2.port
    t0 = time.monotonic()
    res = agents.punch([(s1, s2)], timeout=TIMEOUT)
    wall = time.monotonic() - t0
    for me, peer in (("s1", "s2"), ("s2", "s1")):
        r = res[me]["peers"][peer]
        assert not r["ok"]
        assert TIMEOUT - 0.05 <= r["elapsed"] <= TIMEOUT + 0.5, r
        assert "symmetric" in r["reason"] and "relay" not in r["reason"], r["reason"]  # (whether to relay is not the punch's call)
        assert "ECONNREFUSED" not in r["reason"]  # dropped silently, never RST
        assert r["attempts"] >= 2
    assert wall < TIMEOUT + 3.0


def test_cone_symmetric_fails(agents: Agents) -> None:
    """Documented outcome: port-restricted cone <-> symmetric cannot punch.

    The symmetric side's SYN leaves from a fresh random port, which the
    cone's filter (address AND port dependent) does not know; the cone
    side's SYN goes to the port the relay saw, which the symmetric NAT only
    maps for the relay.  Both sides fail at the deadline -> use the relay.
    """
    c1, s1 = agents.spawn("c1", "s1")
    res = agents.punch([(c1, s1)], timeout=2.0)
    for me, peer in (("c1", "s1"), ("s1", "c1")):
        r = res[me]["peers"][peer]
        assert not r["ok"], r
        assert 1.95 <= r["elapsed"] <= 2.5
        assert "symmetric" in r["reason"]


def test_symmetric_to_public_connects_one_way(agents: Agents) -> None:
    """A symmetric-NAT rank CAN reach a public rank directly: its SYN (from
    a random public port) hits p1's listener.  p1 cannot match it to s1 by
    endpoint, so it lands in ``unmatched`` -- the transport's handshake must
    identify such connections (and p1's punch towards s1 itself fails)."""
    s1, p1 = agents.spawn("s1", "p1")
    res = agents.punch([(s1, p1)], timeout=2.0)
    rs = res["s1"]["peers"]["p1"]
    assert rs["ok"] and rs["via"] == "connect", rs
    assert rs["got"] == "hello from p1 to ?"
    rp = res["p1"]["peers"]["s1"]
    assert not rp["ok"] and 1.95 <= rp["elapsed"] <= 2.5
    stray = res["p1"]["unmatched"]
    assert len(stray) == 1 and stray[0]["got"] == "hello from s1 to p1", stray
    assert stray[0]["remote"][0] == s1.public[0] and stray[0]["remote"][1] != s1.public[1]


def test_four_hosts_all_pairs_in_parallel(agents: Agents) -> None:
    ranks = agents.spawn("c2", "c3", "c4", "p2")
    pairs = list(itertools.combinations(ranks, 2))
    assert len(pairs) == 6
    res = agents.punch(pairs, timeout=TIMEOUT)
    for a, b in pairs:
        check_pair(res, a.name, b.name)
    # parallel, not one peer after another: each rank's whole punch of 3
    # peers takes about as long as one punch
    for r in res.values():
        assert r["punch_time"] < FAST


def test_public_listener_accepts_without_punching(agents: Agents) -> None:
    """Accept case: p1 only listens on its shared port (active=False); c1
    punches.  p1 must accept on the listener -- punch_many does it and
    matches the connection to c1 by its public endpoint."""
    c1, p1 = agents.spawn("c1", "p1")
    res = agents.punch([(c1, p1)], timeout=TIMEOUT,
                       options={"p1": {"listen": True, "active": False}})
    check_pair(res, "c1", "p1")
    assert res["c1"]["peers"]["p1"]["via"] == "connect"
    assert res["p1"]["peers"]["c1"]["via"] == "accept"
    assert tuple(res["p1"]["peers"]["c1"]["remote"]) == c1.public


def test_both_punch_with_listeners(agents: Agents) -> None:
    """Listener on the shared port plus active punching on both sides (what
    ranks will normally run): still exactly one connection per side."""
    c3, p2 = agents.spawn("c3", "p2")
    res = agents.punch([(c3, p2)], timeout=TIMEOUT,
                       options={"c3": {"listen": True}, "p2": {"listen": True}})
    check_pair(res, "c3", "p2")


def test_loopback_without_lab() -> None:
    """Two processes on 127.0.0.1 punching each other's port at the same
    time (no namespaces needed).  Directly reachable peers: whichever SYN
    lands first is accepted by the other side's temporary listener, or the
    SYNs cross (simultaneous open, both "connect")."""
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    code = (
        "import sys\n"
        "from fmpi.natpunch.simultaneous_open import punch\n"
        "me, other = int(sys.argv[1]), int(sys.argv[2])\n"
        "r = punch(('127.0.0.1', me), [('127.0.0.1', other)], timeout=3.0)\n"
        "assert r.ok, r.reason\n"
        "assert r.sock.getsockname() == ('127.0.0.1', me)\n"
        "r.sock.sendall(b'x%d\\n' % me)\n"
        "print(r.via, r.sock.makefile('rb').readline().decode().strip(), flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC_DIR))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(a), str(b)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a, b in (ports, ports[::-1])]
    try:
        outs = [p.communicate(timeout=15) for p in procs]
    finally:
        for p in procs:
            p.kill()
    vias = []
    for (out, err), other, p in zip(outs, ports[::-1], procs, strict=True):
        assert p.returncode == 0, err
        via, got = out.split()
        assert got == f"x{other}"
        vias.append(via)
    assert sorted(vias) in (["accept", "connect"], ["connect", "connect"])


def test_refused_fails_fast_with_reason() -> None:
    """Nothing on the port (loopback, RSTs): retried until the deadline,
    the reason says refused."""
    import socket

    from fmpi.natpunch.simultaneous_open import deadline_in, punch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    t0 = time.monotonic()
    r = punch(("127.0.0.1", 0), [("127.0.0.1", dead_port)], deadline_in(0.6))
    assert not r.ok and r.sock is None
    assert 0.55 < time.monotonic() - t0 < 1.0
    assert "ECONNREFUSED" in r.reason and "relay" not in r.reason  # (whether to relay is not the punch's call)
    assert r.attempts >= 3  # 100-250 ms pacing
    assert r.attempts <= 8


def test_listener_matching_unmatched_and_extras_loopback() -> None:
    """punch_many's listener side on loopback: a connection from a peer's
    candidate endpoint completes that peer (via accept); one from an
    unknown endpoint goes to ``unmatched``; with ``settle`` a second working
    candidate of the same peer ends up in ``extra_socks``."""
    import socket

    from fmpi.natpunch.simultaneous_open import punch_many
    from fmpi.natpunch.sockets import bind_reusable, make_listener

    lst = make_listener("0.0.0.0", 0)
    port = lst.getsockname()[1]
    known = bind_reusable("127.0.0.1", 0)
    stranger = socket.socket()
    try:
        known.connect(("127.0.0.1", port))
        stranger.connect(("127.0.0.1", port))
        unmatched: list = []
        res = punch_many(("0.0.0.0", port), {"k": [known.getsockname()]}, timeout=1.0,
                         listener=lst, active=False, unmatched=unmatched)
        assert res["k"].ok and res["k"].via == "accept"
        assert res["k"].remote == known.getsockname()
        assert res["k"].elapsed < 0.5
        assert [ep for _s, ep in unmatched] == [stranger.getsockname()]
        assert lst.gettimeout() is None  # caller's listener restored to blocking
        res["k"].close()
        for s, _ep in unmatched:
            s.close()

        # two candidates reaching the same listening port (127.0.0.1 and
        # 127.0.0.2 are both loopback): one sock + one extra with settle
        res = punch_many(("127.0.0.1", 0), {"p": [("127.0.0.1", port), ("127.0.0.2", port)]},
                         timeout=2.0, settle=0.3)
        r = res["p"]
        assert r.ok and len(r.extra_socks) == 1, r
        assert r.elapsed < 0.5
        r.close()
        # without settle: first connection only
        res = punch_many(("127.0.0.1", 0), {"p": [("127.0.0.1", port), ("127.0.0.2", port)]},
                         timeout=2.0)
        assert res["p"].ok and res["p"].extra_socks == []
        res["p"].close()
    finally:
        for s in (lst, known, stranger):
            s.close()
