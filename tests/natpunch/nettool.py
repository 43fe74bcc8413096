"""Tiny network tools run inside lab namespaces by the natpunch tests.

Every command prints JSON lines on stdout (flushed), so the test process can
follow along.  Pure stdlib; started as ``python nettool.py CMD ...``.

observe --port P [--port P2 ...]
    The "relay observer": for every TCP connection, reply one JSON line
    ``{"ip": ..., "port": ...}`` with the peer address it saw (what a NAT
    turned the client's source into), then keep the connection open until
    the client closes it.  This is how ranks learn their public endpoint.
    Prints ``{"event": "ready"}`` once listening.  Runs until killed.
connect --to IP:PORT [--bind-port N] [--timeout T] [--read]
    One blocking connect (optionally from a fixed local port, shared-port
    options set); prints ``{"result": "connected"|"timeout"|"refused"|ERRNO,
    "elapsed": s, "reply": line}``.  ``timeout`` (no answer at all) and
    ``refused`` (RST) are what the NAT tests tell apart.
listen --port P
    Accept forever; prints ``{"event": "accepted", "peer": [ip, port]}``.
"""

from __future__ import annotations

import argparse
import errno
import json
import selectors
import socket
import sys
import time


def emit(**obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def parse_ep(text: str) -> tuple[str, int]:
    ip, _, port = text.rpartition(":")
    return ip, int(port)


def cmd_observe(ports: list[int]) -> None:
    sel = selectors.DefaultSelector()
    for port in ports:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(256)
        srv.setblocking(False)
        sel.register(srv, selectors.EVENT_READ, "listener")
    emit(event="ready", ports=ports)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if key.data == "listener":
                try:
                    conn, (ip, port) = sock.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(True)
                try:
                    conn.sendall((json.dumps({"ip": ip, "port": port}) + "\n").encode())
                except OSError:
                    conn.close()
                    continue
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ, "client")
            else:
                # the client keeps the connection open while it needs the
                # mapping; close our side when it goes away
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(sock)
                    sock.close()


def cmd_connect(to: str, bind_port: int | None, timeout: float, read: bool) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if bind_port is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("0.0.0.0", bind_port))
    sock.settimeout(timeout)
    t0 = time.monotonic()
    reply = None
    try:
        sock.connect(parse_ep(to))
        result = "connected"
        if read:
            reply = sock.makefile("r").readline().strip()
    except TimeoutError:
        result = "timeout"
    except ConnectionRefusedError:
        result = "refused"
    except OSError as exc:
        result = errno.errorcode.get(exc.errno or 0, str(exc))
    emit(result=result, elapsed=time.monotonic() - t0, reply=reply,
         local=list(sock.getsockname()))
    sock.close()


def cmd_listen(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(16)
    emit(event="ready", port=port)
    conns = []
    while True:
        conn, peer = srv.accept()
        conns.append(conn)
        emit(event="accepted", peer=list(peer))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("observe")
    p.add_argument("--port", type=int, action="append", required=True)
    p = sub.add_parser("connect")
    p.add_argument("--to", required=True)
    p.add_argument("--bind-port", type=int)
    p.add_argument("--timeout", type=float, default=2.0)
    p.add_argument("--read", action="store_true")
    p = sub.add_parser("listen")
    p.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    if a.cmd == "observe":
        cmd_observe(a.port)
    elif a.cmd == "connect":
        cmd_connect(a.to, a.bind_port, a.timeout, a.read)
    else:
        cmd_listen(a.port)


if __name__ == "__main__":
    main()
