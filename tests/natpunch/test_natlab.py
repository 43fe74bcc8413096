"""The NAT lab behaves like the NATs fmpi meets in the cloud.

All checks run real TCP between real processes in the lab's namespaces and
tell a silent drop (connect times out) from a refusal (RST) -- the
difference that decides whether hole punching can work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from labtools import NETTOOL, OBSERVER_PORTS, TESTS_DIR, child_env, spawn_json
from natlab.topology import NatLab, cleanup_stale

LAB_HOSTS = {"c1": "cone", "s1": "symmetric", "p1": "none", "p2": "none"}


def connect(lab: NatLab, host: str, to: tuple[str, int], *, bind_port: int | None = None,
            timeout: float = 1.0, read: bool = False) -> dict:
    argv = [sys.executable, NETTOOL, "connect", "--to", f"{to[0]}:{to[1]}",
            "--timeout", str(timeout)]
    if bind_port is not None:
        argv += ["--bind-port", str(bind_port)]
    if read:
        argv.append("--read")
    out = lab.run(host, argv, timeout=timeout + 10, check=True, env=child_env())
    return json.loads(out.stdout)


def observe(lab: NatLab, host: str, port: int, obs_port: int = OBSERVER_PORTS[0]) -> tuple:
    r = connect(lab, host, (lab.relay_ip, obs_port), bind_port=port, read=True)
    assert r["result"] == "connected", r
    seen = json.loads(r["reply"])
    return seen["ip"], seen["port"]


def test_addresses(lab: NatLab) -> None:
    assert lab.public_ip("c1") == lab.gateway_ip("c1") != lab.lan_ip("c1")
    assert lab.lan_ip("c1").startswith("192.168.")
    assert lab.public_ip("p1") == lab.lan_ip("p1") and lab.gateway_ip("p1") is None
    # no namespace has a default route out of the lab (only LAN hosts, to
    # their gateway)
    for host in ("relay", "p1", "gw-c1"):
        routes = lab.run(host, ["ip", "route"], check=True).stdout
        assert "default" not in routes, (host, routes)


def test_cone_nat_connects_out_and_preserves_port(lab: NatLab) -> None:
    port = lab.fresh_port()
    for obs_port in OBSERVER_PORTS:  # two different destinations, same mapping
        assert observe(lab, "c1", port, obs_port) == (lab.public_ip("c1"), port)


def test_symmetric_nat_changes_port_per_destination(lab: NatLab) -> None:
    port = lab.fresh_port()
    seen = [observe(lab, "s1", port, obs_port) for obs_port in OBSERVER_PORTS]
    assert seen[0][0] == seen[1][0] == lab.public_ip("s1")
    assert seen[0][1] != seen[1][1], seen
    assert port not in (seen[0][1], seen[1][1]), seen


def test_public_host_cannot_connect_in_silently_dropped(lab: NatLab) -> None:
    """A listener behind the cone NAT is unreachable from the internet, and
    the SYN is dropped (timeout), not refused."""
    port = lab.fresh_port()
    srv = spawn_json(lab, "c1", [NETTOOL, "listen", "--port", str(port)], "listener c1")
    try:
        assert srv.read(10)["event"] == "ready"
        # the listener really is up: reachable from its own LAN side
        # (the gateway's LAN address is inside the lab too)
        assert connect(lab, "gw-c1", (lab.lan_ip("c1"), port))["result"] == "connected"
        assert srv.read(5)["event"] == "accepted"
        r = connect(lab, "p1", (lab.public_ip("c1"), port), timeout=1.0)
        assert r["result"] == "timeout", r
        assert r["elapsed"] >= 0.95
    finally:
        srv.stop(grace=0)


def test_syn_to_gateway_public_ip_dropped_not_refused(lab: NatLab) -> None:
    # control: a public host with nothing on the port answers RST at once
    r = connect(lab, "p1", (lab.public_ip("p2"), lab.fresh_port()), timeout=1.0)
    assert r["result"] == "refused" and r["elapsed"] < 0.5, r
    # the same towards a NAT gateway (either kind): silence
    for host in ("c1", "s1"):
        r = connect(lab, "p1", (lab.public_ip(host), lab.fresh_port()), timeout=0.7)
        assert r["result"] == "timeout", (host, r)


def test_reply_traffic_to_natted_host_is_let_in(lab: NatLab) -> None:
    """ESTABLISHED,RELATED is forwarded in: an outbound connection works and
    the reply (the observer's line) comes back."""
    r = connect(lab, "s1", (lab.relay_ip, OBSERVER_PORTS[0]), read=True)
    assert r["result"] == "connected" and json.loads(r["reply"])["ip"] == lab.public_ip("s1")


def test_lab_cleanup_and_stale_cleanup(lab: NatLab) -> None:
    """A lab closes cleanly; one whose owner was SIGKILLed is removed by
    cleanup_stale, while live labs (the module's) are left alone."""
    with NatLab() as tmp:
        tmp.add_host("a", "cone")
        mine = {h.ns for h in tmp.hosts.values()} | {tmp.ns("gw-a"), tmp.inet_ns}
        assert mine <= _lab_namespaces()
        tmp.popen("a", ["sleep", "60"])
    assert not (mine & _lab_namespaces())

    code = ("import sys, time; sys.path.insert(0, sys.argv[1])\n"
            "from natlab.topology import NatLab\n"
            "lab = NatLab(); lab.add_host('a', 'cone')\n"
            "lab.popen('a', ['sleep', '60'])\n"
            "print(lab.tag, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(TESTS_DIR)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        tag = proc.stdout.readline().strip()
        assert tag
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stale = {ns for ns in _lab_namespaces() if ns.startswith(tag + "-")}
        assert len(stale) == 4  # inet, relay, gateway, host
        removed = cleanup_stale()
        assert stale <= set(removed)
        assert not (stale & _lab_namespaces())
        # our own, live lab (the module fixture) was not touched
        assert {h.ns for h in lab.hosts.values()} <= _lab_namespaces()
        assert lab.ns("gw-c1") in _lab_namespaces() and lab.inet_ns in _lab_namespaces()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _lab_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}

