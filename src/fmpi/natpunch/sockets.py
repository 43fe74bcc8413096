"""The shared port: sockets that may all bind one local ip:port (relay connection, listener, punch attempts).

Why one port, and what Linux does with it, is told in ``simultaneous_open.py``.
"""

from __future__ import annotations

import ipaddress
import socket


def _family(ip: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET


def bind_reusable(local_ip: str, port: int) -> socket.socket:
    """A TCP socket bound to ``local_ip:port`` that may share that port.

    Sets SO_REUSEADDR and SO_REUSEPORT before bind(), which lets the relay
    connection, a listener and any number of punch attempts (each towards a
    different remote endpoint) all use the same local port -- the one whose
    public mapping the relay observed.  Every socket sharing the port must
    be created this way (and by the same uid).  ``port=0`` picks a free port
    (read it back with ``getsockname()``).  Use ``local_ip="0.0.0.0"`` unless
    you need a specific interface; all sharers should use the same ip.
    """
    sock = socket.socket(_family(local_ip), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((local_ip, port))
    except BaseException:
        sock.close()
        raise
    return sock


def make_listener(local_ip: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening socket on a shared port (see :func:`bind_reusable`).

    Pass it to :func:`punch_many` (``listener=``) so that peers which reach
    this port while we have no attempt towards them get accepted and
    matched to their key.  Keep accepting on it yourself afterwards: peers
    that connect later (or duplicates) queue up on it.
    """
    sock = bind_reusable(local_ip, port)
    try:
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def tune_connected(sock: socket.socket) -> socket.socket:
    """A connection a punch hands over: blocking, with TCP_NODELAY."""
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
