"""A stand-in fmpi rank for the hole-punching tests (runs in a lab host).

Protocol with the test process (JSON lines; stdout is flushed per line):

1. Binds the shared local port ``--port`` (SO_REUSEADDR+SO_REUSEPORT),
   connects from it to the observer (``--relay IP:PORT``) and learns its
   public endpoint exactly like a real rank does from the relay.  Prints
   ``{"event": "endpoint", "public": [ip, port], "lan": [ip, port]}``.
   The relay connection stays open (it keeps the NAT mapping alive).
2. Reads one line from stdin: ``{"peers": {key: [[ip, port], ...]},
   "timeout": s, "delay": s, "listen": bool, "auto_listen": bool,
   "active": bool}``.
3. Sleeps ``delay``, then calls ``punch_many`` (with a long-lived listener
   on the same port if ``listen``, else punch_many's temporary one unless
   ``auto_listen`` is false).  For every connected peer it sends
   ``"hello from NAME to KEY"`` and reads the peer's line, so bytes are
   proven to flow both ways.  Prints ``{"event": "result", ...}``.
4. Keeps the sockets open until stdin says ``quit`` (or closes), so the
   other side can finish reading before any close/RST.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from fmpi.natpunch.simultaneous_open import punch_many
from fmpi.natpunch.sockets import bind_reusable, make_listener


def emit(**obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--relay", required=True)
    a = ap.parse_args()
    rip, _, rport = a.relay.rpartition(":")

    relay = bind_reusable("0.0.0.0", a.port)
    relay.settimeout(5.0)
    relay.connect((rip, int(rport)))
    seen = json.loads(relay.makefile("r").readline())
    emit(event="endpoint", public=[seen["ip"], seen["port"]],
         lan=list(relay.getsockname()))

    cmd = json.loads(sys.stdin.readline())
    peers = {k: [tuple(ep) for ep in v] for k, v in cmd["peers"].items()}
    listener = make_listener("0.0.0.0", a.port) if cmd.get("listen") else None
    time.sleep(float(cmd.get("delay", 0.0)))
    unmatched: list[tuple[socket.socket, tuple[str, int]]] = []
    t0 = time.monotonic()
    results = punch_many(("0.0.0.0", a.port), peers, timeout=float(cmd.get("timeout", 3.0)),
                         listener=listener, listen=bool(cmd.get("auto_listen", True)),
                         active=bool(cmd.get("active", True)), unmatched=unmatched)
    punch_time = time.monotonic() - t0

    report: dict[str, dict[str, object]] = {}
    for key, r in results.items():
        report[key] = {"ok": r.ok, "reason": r.reason, "elapsed": r.elapsed,
                       "attempts": r.attempts, "via": r.via,
                       "remote": list(r.remote) if r.remote else None,
                       "errors": {f"{ip}:{port}": e for (ip, port), e in r.errors.items()},
                       "extras": len(r.extra_socks)}
        if r.sock is not None:
            report[key]["blocking"] = r.sock.getblocking()
            report[key]["nodelay"] = bool(r.sock.getsockopt(socket.IPPROTO_TCP,
                                                            socket.TCP_NODELAY))
            report[key]["local"] = list(r.sock.getsockname())
            r.sock.sendall(f"hello from {a.name} to {key}\n".encode())
    for key, r in results.items():
        if r.sock is not None:
            r.sock.settimeout(5.0)
            try:
                report[key]["got"] = r.sock.makefile("r").readline().strip()
            except OSError as exc:
                report[key]["got"] = f"error: {exc!r}"
    # connections accepted from endpoints that are no peer's candidate (a
    # symmetric-NAT peer's random port): the real transport identifies them
    # by its handshake; here the hello line does it.
    stray = []
    for sock, ep in unmatched:
        sock.sendall(f"hello from {a.name} to ?\n".encode())
        sock.settimeout(5.0)
        try:
            got = sock.makefile("r").readline().strip()
        except OSError as exc:
            got = f"error: {exc!r}"
        stray.append({"remote": list(ep), "got": got})
    emit(event="result", name=a.name, punch_time=punch_time, peers=report, unmatched=stray)

    sys.stdin.readline()  # "quit" or EOF
    for r in results.values():
        r.close()
    for sock, _ep in unmatched:
        sock.close()
    relay.close()
    if listener is not None:
        listener.close()


if __name__ == "__main__":
    main()
