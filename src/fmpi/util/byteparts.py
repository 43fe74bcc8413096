"""Frames as lists of buffers: what is left of them after a partial write.

Shared by the transport's queued writers, the DSO client and the Redis
relay line, which write a header and a payload without copying the payload.
"""

from __future__ import annotations

import socket


def advance_parts(parts: list[memoryview], n: int) -> list[memoryview]:
    """Drop the first `n` bytes of a list of buffers."""
    i = 0
    while i < len(parts) and n >= len(parts[i]):
        n -= len(parts[i])
        i += 1
    rest = parts[i:]
    if rest and n:
        rest[0] = rest[0][n:]
    return rest


def sendmsg_all(sock: socket.socket, parts: list[memoryview]) -> None:
    """Write every byte of `parts` on a blocking socket (sendmsg may take only some)."""
    while parts:
        parts = advance_parts(parts, sock.sendmsg(parts))


def take_parts(parts: list[memoryview], n: int) -> tuple[list[memoryview], list[memoryview]]:
    """Split off the first `n` bytes of `parts`: (those, the rest), as views (no copies)."""
    taken: list[memoryview] = []
    i = 0
    while n > 0:
        p = parts[i]
        if len(p) <= n:
            taken.append(p)
            n -= len(p)
            i += 1
        else:
            taken.append(p[:n])
            return taken, [p[n:], *parts[i + 1 :]]
    return taken, parts[i:]
