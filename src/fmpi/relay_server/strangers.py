"""Connections that have not said who they are yet: bounded in number and in the bytes they may make the relay hold.

Before its first request (CREATE, REGISTER, DSO_*) a connection is a
stranger: anyone who can reach the port. Left alone, 300 strangers that each
announce a 1 MiB request and send half of it made the relay hold 300 half
frames (about 160 MiB, never given back to the job that needs it). So:

- at most ``max_count`` strangers at a time; one more evicts the *oldest*
  (a real client says who it is within milliseconds, a stranger that waits
  is the one to drop, and a flood cannot lock newcomers out);
- a first request of up to ``SMALL`` bytes (every REGISTER and CREATE but
  the resume of a job of thousands of ranks) is read at once; a larger one
  only within a budget of ``max_bytes`` shared by all strangers, and over it
  it is refused as busy (the announced length is reserved before a byte of
  the body is read), so a flood of large announcements cannot lock out the
  small requests of real clients.

What a stranger's socket buffers besides is bounded by the stream reader's
own limit (asyncio pauses reading at twice its 64 KiB), so the relay holds
at most about max_count x (128 KiB + SMALL) + max_bytes for strangers.

Once a crowd of strangers is gone, the memory it made the relay allocate
is handed back to the system (glibc's ``malloc_trim``): the allocator keeps
freed blocks of that size for reuse otherwise, and a relay that served one
flood would keep its peak for the rest of its life.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from collections import OrderedDict

from .records import Connection, Refused

log = logging.getLogger("fmpi.relay")

SMALL = 64 << 10
# A job's ranks connect and register within milliseconds, but a thousand starting at once (or a benchmark
# that connects them all before it lets them register) are strangers together for a while.
DEFAULT_MAX_STRANGERS = 1024
CROWD = 32  # this many strangers at once is a crowd: its memory is given back once it is gone
TRIM_DELAY = 0.5  # seconds after the last stranger's handler ended (its task's last references go then)


def _give_back_memory() -> None:
    """Return freed heap memory to the system (glibc; elsewhere nothing to do)."""
    # The half-read bodies of a crowd that went away sit in IncompleteReadError.partial, inside reference
    # cycles (exception, traceback, frame): only the cyclic collector frees them.
    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass  # not glibc: its allocator decides


class Strangers:
    def __init__(self, max_count: int = DEFAULT_MAX_STRANGERS, max_bytes: int = 32 << 20) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._waiting: OrderedDict[asyncio.Task, Connection] = OrderedDict()
        self._reserved = 0
        self.evicted = 0
        self._crowd = False
        self._alive: set[asyncio.Task] = set()  # strangers' handlers still running (evicted ones too)

    def arrived(self, task: asyncio.Task, conn: Connection) -> None:
        """A new connection; the oldest stranger makes room for it when there are too many."""
        self._waiting[task] = conn
        self._alive.add(task)
        self._crowd = self._crowd or len(self._alive) >= CROWD
        while len(self._waiting) > self.max_count:
            _, oldest = self._waiting.popitem(last=False)
            self.evicted += 1
            if self.evicted in (1, 10, 100) or self.evicted % 1000 == 0:
                log.warning("more than %d connections without a request: dropped the oldest (%d so far)",
                            self.max_count, self.evicted)
            oldest.writer.transport.abort()

    def introduced(self, task: asyncio.Task) -> None:
        """The connection made its first request: no longer a stranger."""
        self._waiting.pop(task, None)
        self._alive.discard(task)

    def left(self, task: asyncio.Task) -> None:
        """The connection's handler is ending. When the last of a crowd of strangers is gone (evicted or
        refused ones included), what they made the relay allocate is given back."""
        self.introduced(task)
        if self._crowd and not self._alive:
            self._crowd = False
            asyncio.get_running_loop().call_later(TRIM_DELAY, _give_back_memory)

    def is_stranger(self, task: asyncio.Task) -> bool:
        return task in self._waiting

    async def read_body(self, conn: Connection, length: int) -> bytes:
        """Read a stranger's request body of `length` bytes (a large one within the budget all strangers share)."""
        if length <= SMALL:
            return await conn.reader.readexactly(length)
        if self._reserved + length > self.max_bytes:
            raise Refused("busy", "the relay is busy: too many connections are sending requests at once; try again")
        self._reserved += length
        try:
            return await conn.reader.readexactly(length)
        finally:
            self._reserved -= length
