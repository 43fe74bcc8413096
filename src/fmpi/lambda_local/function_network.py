"""Lambda's network, rehearsed: each function behind a NAT of its own that lets nothing in it did not ask for.

On AWS a function has a private address, reaches the world through a NAT,
and accepts no inbound connection: ranks meet at a relay and hole-punch
their links. ``fmpi-lambda-local`` (as root) gives every invocation the same:

* a network namespace whose only way out is a veth on the bridge
  ``fmpill0`` (the host is ``10.213.0.1`` there; the emulator and the
  user's relay listen on it);
* inside it, the function's own address is private (``169.254.76.1``, the
  kind of address a Lambda function sees) and every packet leaving is
  masqueraded to the namespace's "public" bridge address, port kept where
  free (an endpoint-independent, "cone" mapping, as Lambda's);
* a firewall that drops every packet that is not an answer to one the
  function sent: a connection to a function fails unless it punched first.
  A simultaneous-open SYN from a peer matches the reply direction of the
  function's own SYN, so punching works as on AWS.

What it does not model: latency, bandwidth, NAT mappings that expire, a
symmetric NAT. tests/natlab has those for the project's own tests.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import threading

BRIDGE = "fmpill0"
NETWORK = ipaddress.ip_network("10.213.0.0/16")
HOST_IP = "10.213.0.1"
PRIVATE_IP = "169.254.76.1"  # what the function sees as its own address
NS_PREFIX = "fmpill-"
FORWARD_RULE = ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")


def available() -> tuple[bool, str]:
    """Whether this machine can give functions a network of their own (root, iproute2, iptables)."""
    if os.geteuid() != 0:
        return False, "needs root"
    missing = [tool for tool in ("ip", "iptables", "iptables-restore") if shutil.which(tool) is None]
    if missing:
        return False, f"needs {' and '.join(missing)}"
    return True, ""


def _run(*argv: str, stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit status {done.returncode}'}")


def _firewall() -> str:
    """iptables-restore input for one function's namespace (see the module's docstring)."""
    return "\n".join([
        "*nat",
        ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
        "-A POSTROUTING -o eth0 -j MASQUERADE",
        "COMMIT",
        "*filter",
        ":INPUT DROP [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
        "-A INPUT -i lo -j ACCEPT",
        "-A INPUT -i eth0 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        "COMMIT",
        "",
    ])


class FunctionNetwork:
    """The bridge, and one namespace per running invocation (``acquire`` / ``release``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free = (str(ip) for ip in NETWORK.hosts() if str(ip) != HOST_IP)
        self._returned: list[str] = []
        self._in_use: dict[str, str] = {}  # namespace -> its public address
        self._count = 0

    def start(self) -> FunctionNetwork:
        remove_stale()
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{HOST_IP}/{NETWORK.prefixlen}", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        # (with br_netfilter loaded, bridged packets cross the host's FORWARD chain, which may drop them)
        _run("iptables", "-I", "FORWARD", *FORWARD_RULE)
        return self

    def acquire(self) -> str:
        """A fresh namespace behind its own NAT; returns its name."""
        with self._lock:
            public = self._returned.pop() if self._returned else next(self._free)
            self._count += 1
            ns, outer = f"{NS_PREFIX}{self._count}", f"fll{self._count}"
            self._in_use[ns] = public
        try:
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", outer, "master", BRIDGE, "up")
            inside = ("ip", "netns", "exec", ns)
            _run(*inside, "ip", "link", "set", "lo", "up")
            _run(*inside, "ip", "addr", "add", f"{PRIVATE_IP}/32", "dev", "lo")  # (no dummy links in every kernel)
            _run(*inside, "ip", "addr", "add", f"{public}/{NETWORK.prefixlen}", "dev", "eth0")
            _run(*inside, "ip", "link", "set", "eth0", "up")
            # Leave from the private address, so the NAT below has something to translate
            # (and the rank learns from the relay that it is behind one, as on Lambda).
            _run(*inside, "ip", "route", "replace", str(NETWORK), "dev", "eth0", "src", PRIVATE_IP)
            _run(*inside, "iptables-restore", stdin=_firewall())
        except OSError:
            self.release(ns)
            raise
        return ns

    def release(self, ns: str) -> None:
        """Delete the namespace (its processes are gone: the executor killed them) and reuse its address."""
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)  # takes its veth pair with it
        with self._lock:
            public = self._in_use.pop(ns, None)
            if public is not None:
                self._returned.append(public)

    def close(self) -> None:
        for ns in list(self._in_use):
            self.release(ns)
        _remove_bridge()


def remove_stale() -> None:
    """What an emulator that was killed left behind: its namespaces and the bridge."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(NS_PREFIX):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    _remove_bridge()


def _remove_bridge() -> None:
    while subprocess.run(["iptables", "-D", "FORWARD", *FORWARD_RULE], capture_output=True, check=False).returncode == 0:
        pass  # (one rule per start; a killed emulator may have left several)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
