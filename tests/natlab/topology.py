"""A NAT laboratory built from Linux network namespaces.

The lab emulates the network that fmpi ranks see on AWS Lambda:

* an "internet": one namespace holding a Linux bridge (``br0``) on
  198.18.0.0/15 (RFC 2544 benchmark range, never routed anywhere real);
* a relay host (``relay``) and optional public hosts attached directly to
  that bridge;
* rank hosts, each behind its OWN NAT gateway namespace.  A gateway has a
  LAN side (``lan0``, 192.168.N.1/24) and a public side (``wan0``) on the
  bridge.

NAT kinds (per gateway):

``cone``
    ``MASQUERADE``: Linux keeps the source port when it is free, so the
    mapping is endpoint independent ("port preserving"), while conntrack
    only lets in packets that match an existing flow, i.e. the filtering is
    address-and-port dependent: a *port-restricted cone NAT*, like Lambda's.
``symmetric``
    ``MASQUERADE --random-fully``: every new flow (every destination) gets a
    random public port, so the endpoint learned via the relay is useless to
    other peers.
``none``
    the host sits directly on the internet bridge (its LAN ip is its
    public ip).

Every gateway behaves like a cloud NAT that silently drops unsolicited
traffic: FORWARD from the internet only for ESTABLISHED,RELATED, and INPUT
policy DROP (so a punching SYN that reaches the gateway before the inside
host has opened the mapping is dropped, not answered with RST by the
gateway's own kernel).

Nothing is created in the root namespace: the bridge and both ends of every
veth live inside the lab's namespaces, and no namespace has a default route
that leads out of the lab, so lab traffic cannot leave the machine.
Deleting the namespaces (after killing the processes inside them) removes
everything.

Usage::

    with NatLab() as lab:
        a = lab.add_host("a", nat="cone")
        b = lab.add_host("b", nat="none")
        p = lab.popen("a", [sys.executable, "-c", "..."])
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

NatKind = Literal["cone", "symmetric", "none"]
NAT_KINDS: tuple[str, ...] = ("cone", "symmetric", "none")

#: Default prefix of every namespace a lab creates.  Full names look like
#: ``fmpinl-<pid>-<n>-<role>`` so stale labs of dead processes can be found.
DEFAULT_PREFIX = "fmpinl-"

INTERNET_NET = "198.18.0.0/15"
INTERNET_PREFIXLEN = 15
RELAY_IP = "198.18.0.1"

_lab_counter = itertools.count(1)
_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")


class NatLabError(RuntimeError):
    """A lab command failed (the message carries the command and stderr)."""


# --------------------------------------------------------------------------
# small command helpers
# --------------------------------------------------------------------------


def _run(argv: Sequence[str], *, input: str | None = None, check: bool = True,
         timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise NatLabError(
            f"command failed ({proc.returncode}): {' '.join(argv)}\n"
            f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}")
    return proc


def _list_netns() -> list[str]:
    proc = _run(["ip", "netns", "list"], check=False)
    if proc.returncode != 0:
        return []
    # lines look like "name (id: 3)" or just "name"
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    proc = _run(["ip", "netns", "pids", ns], check=False)
    if proc.returncode != 0:
        return []
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def _kill_pids(pids: Sequence[int], grace: float = 1.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < end:
        alive = [p for p in alive if _pid_alive(p)]
        if alive:
            time.sleep(0.02)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as dead for our purposes
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _set_sysctl(ns: str, setting: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``sysctl -w`` inside *ns* without needing procps: /proc/sys/net shows
    the settings of the reader's network namespace."""
    key, value = setting.split("=", 1)
    path = "/proc/sys/" + key.replace(".", "/")
    return _run(["ip", "netns", "exec", ns, "sh", "-c", 'printf "%s\n" "$1" > "$2"', "sh",
                 value, path], check=check)


def _delete_netns(ns: str) -> None:
    """Kill whatever still runs inside *ns*, then delete it (best effort)."""
    for _ in range(3):
        pids = [p for p in _netns_pids(ns) if p != os.getpid()]
        if not pids:
            break
        _kill_pids(pids)
    _run(["ip", "netns", "del", ns], check=False)


# --------------------------------------------------------------------------
# capability check and stale cleanup
# --------------------------------------------------------------------------

_available_cache: tuple[bool, str] | None = None


def natlab_available() -> tuple[bool, str]:
    """Can a NAT lab be built here?  Returns ``(ok, reason)``.

    Probes for real (creates and deletes a throw-away namespace and installs
    the exact kinds of iptables rules the lab uses), so a ``True`` means the
    lab will work, and a ``False`` carries the reason to skip with.
    """
    global _available_cache
    if _available_cache is not None:
        return _available_cache
    _available_cache = _probe()
    return _available_cache


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"natlab needs Linux network namespaces (platform is {sys.platform})"
    if os.geteuid() != 0:
        return False, "natlab needs root (CAP_NET_ADMIN/CAP_SYS_ADMIN) to create network namespaces"
    for tool in ("ip", "iptables", "iptables-restore"):
        if shutil.which(tool) is None:
            return False, (f"natlab needs the '{tool}' command "
                           "(Debian packages: iproute2, iptables)")
    ns = f"{DEFAULT_PREFIX}{os.getpid()}-probe"
    try:
        proc = _run(["ip", "netns", "add", ns], check=False)
        if proc.returncode != 0:
            return False, f"'ip netns add' failed: {proc.stderr.strip()}"
        proc = _run(["ip", "-n", ns, "link", "add", "br0", "type", "bridge"], check=False)
        if proc.returncode != 0:
            return False, f"cannot create a Linux bridge in a netns: {proc.stderr.strip()}"
        proc = _run(["ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                    check=False)
        if proc.returncode != 0:
            return False, f"cannot create veth pairs: {proc.stderr.strip()}"
        rules = _gateway_rules("symmetric", wan="v0", lan="v1")
        proc = _run(["ip", "netns", "exec", ns, "iptables-restore"], input=rules, check=False)
        if proc.returncode != 0:
            return False, ("iptables in a netns does not support MASQUERADE/--random-fully/"
                           f"conntrack: {proc.stderr.strip()}")
        proc = _set_sysctl(ns, "net.ipv4.ip_forward=1", check=False)
        if proc.returncode != 0:
            return False, f"cannot enable ip_forward in a netns: {proc.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"natlab probe failed: {exc}"
    finally:
        _run(["ip", "netns", "del", ns], check=False)
    return True, "ok"


def cleanup_stale(prefix: str = DEFAULT_PREFIX, *, only_dead_owners: bool = True) -> list[str]:
    """Delete leftover lab namespaces whose names start with *prefix*.

    Lab namespaces embed the pid of the process that built them; with
    ``only_dead_owners`` (the default) namespaces of still-running processes
    are left alone so concurrent test runs do not destroy each other's labs.
    Processes still running inside a deleted namespace are killed.
    Returns the deleted namespace names.
    """
    removed: list[str] = []
    for ns in _list_netns():
        if not ns.startswith(prefix):
            continue
        owner = ns[len(prefix):].split("-", 1)[0]
        if only_dead_owners and owner.isdigit() and _pid_alive(int(owner)):
            continue
        _delete_netns(ns)
        removed.append(ns)
    return removed


# --------------------------------------------------------------------------
# the lab
# --------------------------------------------------------------------------


def _gateway_rules(kind: str, *, wan: str = "wan0", lan: str = "lan0") -> str:
    """iptables-restore input for a NAT gateway of *kind*.

    * MASQUERADE on the public side (``--random-fully`` for symmetric: a
      random source port for every new conntrack entry, hence per
      destination).
    * FORWARD: everything from the LAN out, only ESTABLISHED,RELATED in.
      A simultaneous-open SYN coming back from the peer matches the reply
      direction of the conntrack entry the inside host's own SYN created, so
      it counts as ESTABLISHED and is let through (and de-NATed).
    * INPUT policy DROP: an unsolicited packet to the gateway's public ip
      (e.g. a punching SYN that arrives before the inside host's SYN opened
      the mapping) is silently dropped.  With ACCEPT the gateway kernel
      would answer RST, which kills the peer's attempt, and, worse, the
      half-made conntrack entry would never get confirmed anyway.  Dropping
      in INPUT also means that entry is never confirmed, so it cannot steal
      the port the inside host's later SYN wants to keep.
    """
    masq = "-j MASQUERADE --random-fully" if kind == "symmetric" else "-j MASQUERADE"
    return "\n".join([
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        f"-A POSTROUTING -o {wan} {masq}",
        "COMMIT",
        "*filter",
        ":INPUT DROP [0:0]",
        ":FORWARD DROP [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        "-A INPUT -i lo -j ACCEPT",
        f"-A INPUT -i {lan} -j ACCEPT",
        f"-A INPUT -i {wan} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        f"-A FORWARD -i {lan} -o {wan} -j ACCEPT",
        f"-A FORWARD -i {wan} -o {lan} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        "COMMIT",
        "",
    ])


@dataclass
class Gateway:
    """A NAT gateway namespace (one LAN behind one public ip)."""

    name: str
    ns: str
    kind: str
    public_ip: str
    lan_net: str      # e.g. "192.168.3.0/24"
    lan_ip: str       # gateway's own LAN address, the hosts' default route
    hosts: list[str] = field(default_factory=list)
    _next_host: int = 2


@dataclass
class Host:
    """A host namespace (a rank, a public host or the relay)."""

    name: str
    ns: str
    nat: str
    lan_ip: str          # the address of the host's own interface
    public_ip: str       # where the internet sees it (gateway ip behind NAT)
    gateway: Gateway | None = None


class NatLab:
    """Builds and tears down one NAT lab.  Use as a context manager.

    ``lab.add_host(name, nat)`` adds a rank host; ``nat="cone"`` or
    ``"symmetric"`` puts it behind a fresh gateway of that kind (pass
    ``gateway=<other host name>`` to share an existing host's LAN instead),
    ``nat="none"`` puts it directly on the internet.  The relay host
    ``"relay"`` (198.18.0.1) always exists.
    """

    RELAY = "relay"

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix
        self.tag = f"{prefix}{os.getpid()}-{next(_lab_counter)}"
        self.hosts: dict[str, Host] = {}
        self.gateways: dict[str, Gateway] = {}
        self._namespaces: list[str] = []   # creation order; deleted in reverse
        self._procs: list[subprocess.Popen[Any]] = []
        self._next_public = 10   # 198.18.0.10, .11, ...
        self._next_lan = 1       # 192.168.1.0/24, ...
        self._port_counter = itertools.count(20000)
        self._started = False
        self._closed = False
        self.inet_ns = f"{self.tag}-inet"

    # ---- lifecycle -------------------------------------------------------

    def __enter__(self) -> NatLab:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Create the internet bridge and the relay host."""
        if self._started:
            return
        self._started = True
        self._add_ns(self.inet_ns)
        self._ip(self.inet_ns, "link add br0 type bridge",
                 "link set br0 up", "link set lo up")
        # Bridged frames must not traverse the internet namespace's own
        # iptables/conntrack (br_netfilter defaults to on in new netns); the
        # "internet" is a dumb switch.  Best effort: absent without br_netfilter.
        self._sysctl(self.inet_ns, "net.bridge.bridge-nf-call-iptables=0", check=False)
        relay_ns = f"{self.tag}-relay"
        self._add_ns(relay_ns)
        self._plug_into_internet(relay_ns, "eth0", RELAY_IP)
        self.hosts[self.RELAY] = Host(self.RELAY, relay_ns, "none", RELAY_IP, RELAY_IP)

    def close(self) -> None:
        """Kill every process started in the lab and delete all namespaces.

        Safe to call more than once and after a partial start.
        """
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    proc.kill()
        for proc in self._procs:
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        # hosts first, then gateways, then the internet (reverse creation):
        # deleting a namespace destroys the veths in it and their peers.
        for ns in reversed(self._namespaces):
            _delete_netns(ns)
        self._namespaces.clear()

    # ---- topology --------------------------------------------------------

    def add_host(self, name: str, nat: str = "cone", *, gateway: str | None = None) -> Host:
        """Add a host.  See the class docstring for *nat* and *gateway*."""
        self._check_open()
        if not _NAME_RE.match(name) or name in self.hosts:
            raise ValueError(f"bad or duplicate host name {name!r} "
                             "(lowercase letters/digits, max 12 chars)")
        if gateway is not None:
            gw_host = self.hosts[gateway]
            if gw_host.gateway is None:
                raise ValueError(f"host {gateway!r} is not behind a NAT gateway")
            gw = gw_host.gateway
            nat = gw.kind
        elif nat not in NAT_KINDS:
            raise ValueError(f"nat must be one of {NAT_KINDS}, not {nat!r}")
        ns = f"{self.tag}-h-{name}"
        if nat == "none":
            ip = self._alloc_public_ip()
            self._add_ns(ns)
            self._plug_into_internet(ns, "eth0", ip)
            host = Host(name, ns, "none", ip, ip)
        else:
            if gateway is None:
                gw = self._add_gateway(name, nat)
            host_ip = gw.lan_net.rsplit(".", 1)[0] + f".{gw._next_host}"
            gw._next_host += 1
            self._add_ns(ns)
            # veth created directly between the two namespaces: no name in
            # the root namespace, so concurrent labs never collide.
            lan_if = "lan0" if not gw.hosts else f"lan{len(gw.hosts)}"
            if gw.hosts:
                # Additional hosts on the same LAN: bridge them in the gateway.
                self._ensure_lan_bridge(gw)
            _run(["ip", "-n", gw.ns, "link", "add", lan_if, "type", "veth",
                  "peer", "name", "eth0", "netns", ns])
            if gw.hosts:
                self._ip(gw.ns, f"link set {lan_if} master lanbr", f"link set {lan_if} up")
            else:
                self._ip(gw.ns, f"addr add {gw.lan_ip}/24 dev lan0", "link set lan0 up")
            self._ip(ns, "link set lo up", f"addr add {host_ip}/24 dev eth0",
                     "link set eth0 up", f"route add default via {gw.lan_ip}")
            gw.hosts.append(name)
            host = Host(name, ns, nat, host_ip, gw.public_ip, gw)
        self.hosts[name] = host
        return host

    def _add_gateway(self, name: str, kind: str) -> Gateway:
        n = self._next_lan
        self._next_lan += 1
        if n > 250:
            raise NatLabError("too many gateways in one lab")
        ns = f"{self.tag}-g-{name}"
        self._add_ns(ns)
        public_ip = self._alloc_public_ip()
        self._plug_into_internet(ns, "wan0", public_ip)
        gw = Gateway(name=f"gw-{name}", ns=ns, kind=kind, public_ip=public_ip,
                     lan_net=f"192.168.{n}.0/24", lan_ip=f"192.168.{n}.1")
        # ip_forward is per network namespace and off in a new one.
        self._sysctl(ns, "net.ipv4.ip_forward=1")
        _run(["ip", "netns", "exec", ns, "iptables-restore"], input=_gateway_rules(kind))
        self.gateways[gw.name] = gw
        return gw

    def _ensure_lan_bridge(self, gw: Gateway) -> None:
        """Turn a one-host LAN into a bridged LAN (first extra host only)."""
        if _run(["ip", "-n", gw.ns, "link", "show", "lanbr"], check=False).returncode == 0:
            return
        # Move the gateway's LAN address from lan0 to a bridge that holds lan0.
        self._ip(gw.ns, "link add lanbr type bridge", f"addr del {gw.lan_ip}/24 dev lan0",
                 "link set lan0 master lanbr", f"addr add {gw.lan_ip}/24 dev lanbr",
                 "link set lanbr up")
        # The rules name lan0 as the LAN side; with a bridge it is lanbr.
        _run(["ip", "netns", "exec", gw.ns, "iptables-restore"],
             input=_gateway_rules(gw.kind, lan="lanbr"))
        self._sysctl(gw.ns, "net.bridge.bridge-nf-call-iptables=0", check=False)

    def _alloc_public_ip(self) -> str:
        n = self._next_public
        self._next_public += 1
        return f"198.18.{n // 250}.{n % 250 + 2}" if n >= 250 else f"198.18.0.{n}"

    def _plug_into_internet(self, ns: str, ifname: str, ip: str) -> None:
        port = f"p{len(self._namespaces)}"
        _run(["ip", "-n", ns, "link", "add", ifname, "type", "veth",
              "peer", "name", port, "netns", self.inet_ns])
        self._ip(self.inet_ns, f"link set {port} master br0", f"link set {port} up")
        # /15 on-link and NO default route: the lab internet is the whole world.
        self._ip(ns, "link set lo up", f"addr add {ip}/{INTERNET_PREFIXLEN} dev {ifname}",
                 f"link set {ifname} up")

    def _add_ns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._namespaces.append(ns)

    @staticmethod
    def _ip(ns: str, *cmds: str) -> None:
        # one `ip -batch` per call keeps lab setup fast (fork+exec is the cost)
        _run(["ip", "-n", ns, "-batch", "-"], input="\n".join(cmds) + "\n")

    @staticmethod
    def _sysctl(ns: str, setting: str, *, check: bool = True) -> None:
        _set_sysctl(ns, setting, check=check)

    def _check_open(self) -> None:
        if self._closed:
            raise NatLabError("lab is closed")
        if not self._started:
            self.start()

    # ---- queries ---------------------------------------------------------

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def ns(self, host: str) -> str:
        """Namespace name of *host* (also accepts a gateway name ``gw-X``)."""
        if host in self.gateways:
            return self.gateways[host].ns
        return self.hosts[host].ns

    def lan_ip(self, host: str) -> str:
        return self.hosts[host].lan_ip

    def public_ip(self, host: str) -> str:
        """The address the internet sees for *host* (its gateway's wan ip)."""
        return self.hosts[host].public_ip

    def gateway_ip(self, host: str) -> str | None:
        gw = self.hosts[host].gateway
        return gw.public_ip if gw else None

    @property
    def relay_ip(self) -> str:
        return RELAY_IP

    def fresh_port(self) -> int:
        """A port number not handed out before by this lab (20000, 20001...).

        Tests sharing one lab use fresh ports so conntrack entries and
        TIME_WAIT sockets of an earlier test cannot affect a later one.
        """
        return next(self._port_counter)

    # ---- running things inside hosts ------------------------------------

    def popen(self, host: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              **kw: Any) -> subprocess.Popen[Any]:
        """Start *argv* inside *host*'s namespace (``ip netns exec``).

        ``ip netns exec`` execs the command, so the returned Popen's pid is
        the command itself.  The process gets its own session (so it can be
        killed with its children) and is killed when the lab closes.
        Remaining keyword arguments go to :class:`subprocess.Popen`.
        """
        self._check_open()
        kw.setdefault("start_new_session", True)
        full_env = dict(os.environ if env is None else env)
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv],
                                env=full_env, **kw)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], *, timeout: float = 30.0,
            check: bool = False, input: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run *argv* to completion inside *host*; returns text output."""
        proc = self.popen(host, argv, env=env, stdin=subprocess.PIPE if input is not None
                          else subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise NatLabError(f"timeout after {timeout}s in {host}: {argv}\n{err}") from None
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise NatLabError(f"command failed in {host} ({proc.returncode}): {argv}\n{err}")
        return result

    def python(self, host: str, args: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """``popen`` of the current Python interpreter with *args*."""
        return self.popen(host, [sys.executable, *args], **kw)

    def describe(self) -> str:
        """Human-readable summary of the topology (for failure messages)."""
        lines = [f"lab {self.tag}: internet {INTERNET_NET}, relay {RELAY_IP}"]
        for h in self.hosts.values():
            via = f" behind {h.gateway.kind} NAT {h.public_ip}" if h.gateway else " (public)"
            lines.append(f"  {h.name}: {h.lan_ip}{via}")
        return "\n".join(lines)
