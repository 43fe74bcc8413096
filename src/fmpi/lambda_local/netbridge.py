"""Byte pipes between network namespaces, through Unix sockets (which live in the filesystem, not in a namespace).

The NAT-lab test runs fmpirun inside the lab's relay namespace, where the
in-process moto server (on the test's loopback) is out of reach. So:

* in the test process, ``UnixToTcp(path, host, port)`` accepts on a Unix
  socket and connects each client to moto's TCP port;
* in the lab namespace, ``python netbridge.py PORT PATH`` listens on
  127.0.0.1:PORT there and connects each client to that Unix socket.

Each connection gets two pump threads; everything stops when the process
(or ``close()``) ends.
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _splice(a: socket.socket, b: socket.socket) -> None:
    threading.Thread(target=_pump, args=(a, b), daemon=True).start()
    threading.Thread(target=_pump, args=(b, a), daemon=True).start()


class UnixToTcp:
    """Accept on the Unix socket `path`; connect each client to (host, port)."""

    def __init__(self, path: str, host: str, port: int) -> None:
        if os.path.exists(path):
            os.unlink(path)
        self.path = path
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(path)
        self._listener.listen(64)
        self._target = (host, port)
        threading.Thread(target=self._serve, name="netbridge", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self._target, timeout=10)
                up.settimeout(None)
            except OSError:
                conn.close()
                continue
            _splice(conn, up)

    def close(self) -> None:
        self._listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def tcp_to_unix(port: int, path: str) -> None:
    """Listen on 127.0.0.1:port (in this namespace); connect each client to the Unix socket `path`."""
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        up = socket.socket(socket.AF_UNIX)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            continue
        _splice(conn, up)


if __name__ == "__main__":
    tcp_to_unix(int(sys.argv[1]), sys.argv[2])
