"""Frames as lists of buffers: what is left of them after a partial write.

Shared by the transport's queued writers and the DSO client, which both
write a header and a payload with one ``sendmsg`` and no copy.
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
