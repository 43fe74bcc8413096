"""A shared-memory lane beside a TCP link between two ranks on the same host.

Over loopback TCP a payload is copied into the kernel, walks the TCP/IP
stack and is copied out again: about 4 GB/s here, while a copy in memory runs
at 15-30 GB/s. So between ranks that share a host (the local backend) the
payload of a large DATA frame travels through a ring buffer in a shared
memory file instead, and only its header goes over the link, with the
``LANE`` flag: "the payload is next in the lane". Everything else is as on
any link: frames stay in order, matching, acknowledgements and failover are
the stream's, and the header is what wakes the receiver.

One lane per direction of a link; its writer is the sending rank, its
reader the receiving one. The file lives in ``/dev/shm``:

* the writer creates it on its first large frame (``O_EXCL``), reserves
  its pages (a ``/dev/shm`` too small for it means no lane, not a crash
  later) and maps it;
* the reader opens it when the first ``LANE`` header arrives, maps it and
  unlinks it at once, so from then on it disappears with the two processes;
* the writer unlinks it when its engine stops, in case the reader never
  came (not when the link breaks: the reader may still be reading headers
  that were in flight).

Ring discipline. The writer places payloads one after another and never
splits one: a payload that does not fit before the end of the ring starts
at offset 0 and the gap is skipped. The reader applies the same rule to the
same sizes in the same order (headers arrive in order on TCP), so no
offsets travel. The only shared word is the reader's ``consumed`` count
(bytes it is done with, including skipped gaps), written by the reader after
it has copied a payload out and read by the writer to see the free space.
When a payload does not fit (the reader is behind, or it is larger than the
ring), the frame simply goes inline over TCP, as on any link: nothing waits.

Aligned 8-byte stores and loads are single-copy atomic on x86-64 and arm64;
the reader's copy out of the ring and its store of ``consumed`` are
separated by a Python-level call boundary, and the writer only ever reads
``consumed`` to decide whether to write, never data.

Which links get lanes: ``host_key()`` names this host, network namespace and
``/dev/shm``; ranks exchange it in the handshake, and a link gets lanes when
both keys match and neither side turned lanes off (``FMPI_SHM=0``). Ranks in
different network namespaces (as in the NAT tests) never share a lane, just
as ranks on different machines.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from pathlib import Path

SHM_DIR = "/dev/shm"
#: Payloads at least this large go through the lane (smaller ones are cheap on TCP, where their header goes anyway).
LANE_MIN = 16 * 1024
#: Ring size per direction: it holds several of a ring allreduce's chunks (at most 1 MiB each).
#: Larger payloads go inline. Made only for links that carry a large payload.
DEFAULT_CAPACITY = 4 << 20
#: Bytes before the ring: the reader's ``consumed`` counter, alone on its page.
_CONTROL = mmap.PAGESIZE
#: The host key of a rank that has lanes turned off: it never matches.
NO_KEY = bytes(16)


def host_key() -> bytes:
    """16 bytes that are equal for two processes exactly when they can share a lane."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            parts.append(f.read().strip())
        parts.append(str(os.stat("/proc/self/ns/net").st_ino).encode())
        st = os.stat(SHM_DIR)
        parts.append(f"{st.st_dev}:{st.st_ino}".encode())
    except OSError:
        return NO_KEY  # not Linux, or no /dev/shm: no lanes
    return hashlib.sha256(b"|".join(parts)).digest()[:16]


def lane_path(stem: str, src: int, dst: int) -> str:
    """The file of the lane that carries `src`'s payloads to `dst` (`stem`: from the link's handshake)."""
    return os.path.join(SHM_DIR, f"fmpi-lane-{stem}-{src}-{dst}")


class _Lane:
    """One end of a lane: the file's mapping, once made (lazily: most links never carry a large payload)."""

    __slots__ = ("path", "capacity", "_map", "_data", "_consumed")

    def __init__(self, path: str, capacity: int = DEFAULT_CAPACITY) -> None:
        self.path = path
        self.capacity = capacity
        self._map: mmap.mmap | None = None
        self._data: memoryview | None = None  # the ring
        self._consumed: memoryview | None = None  # the reader's count, one uint64

    def _map_file(self, fd: int) -> None:
        self._map = mmap.mmap(fd, _CONTROL + self.capacity)
        self._consumed = memoryview(self._map)[:8].cast("Q")
        self._data = memoryview(self._map)[_CONTROL:]


class LaneWriter(_Lane):
    """The sending end: places payloads into the ring (the caller holds the pair stream's lock)."""

    __slots__ = ("_produced", "_broken")

    def __init__(self, path: str, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__(path, capacity)
        self._produced = 0
        self._broken = False  # the file could not be made: every frame goes inline

    def place(self, parts: list[memoryview], nbytes: int) -> memoryview | None:
        """Copy a payload of `nbytes` (the concatenation of `parts`) into the ring.

        Returns the bytes in the ring, or None when there is no room (send it inline).
        """
        if self._data is None and not self._create():
            return None
        cap = self.capacity
        pos = self._produced % cap
        skip = cap - pos if pos + nbytes > cap else 0
        if self._produced + skip + nbytes - self._consumed[0] > cap:
            return None  # the reader is behind (or the payload is larger than the ring)
        start = at = 0 if skip else pos
        data = self._data
        for part in parts:
            n = len(part)
            data[at : at + n] = part
            at += n
        self._produced += skip + nbytes
        return data[start:at]

    def _create(self) -> bool:
        if self._broken:
            return False
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            self._broken = True
            return False
        try:
            # Reserve the pages now: a page of a sparse file that tmpfs cannot
            # provide later (a small /dev/shm, as in a container) kills the
            # writer with SIGBUS; a lane that does not fit fails here (ENOSPC).
            os.posix_fallocate(fd, 0, _CONTROL + self.capacity)
            self._map_file(fd)
        except OSError:
            self._broken = True
            Path(self.path).unlink(missing_ok=True)
            return False
        finally:
            os.close(fd)
        return True

    def close(self) -> None:
        """The engine stops: remove the file if the reader never took it (mappings end with the process)."""
        if self._map is not None:
            Path(self.path).unlink(missing_ok=True)


class LaneError(OSError):
    """A ``LANE`` frame whose lane cannot be read: the link fails (over to the relay, which resends inline)."""


class LaneReader(_Lane):
    """The receiving end: payload views in arrival order (the caller holds the pair's ``rx_lock``).

    A payload that arrives before its receive is posted may stay in the ring
    (``hold``) until a receive takes it (``drop``): copying it out into a
    fresh buffer, and later from there into the receive's buffer, costs a
    copy and a page fault per 4 KiB more than one copy from the ring. The
    writer may then reuse bytes only up to the oldest payload still held
    (until then large frames go inline once the ring is full: nothing
    waits). ``drop`` runs on whichever thread posts the receive, hence the
    lock around the shared count.
    """

    __slots__ = ("_cursor", "_start", "_released", "_held", "_lock", "kept")

    def __init__(self, path: str, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__(path, capacity)
        self._cursor = 0  # where the next payload is (bytes since the start, gaps included)
        self._start = 0  # where the payload last taken began
        self._released = 0  # every payload before this is done with, or held
        self._held: dict[int, None] = {}  # starts of held payloads, oldest first
        self._lock = threading.Lock()
        self.kept = False  # the payload last taken is held (its view stays valid)

    def take(self, nbytes: int) -> memoryview:
        """The next payload, `nbytes` long; valid until ``release``."""
        if self._data is None:
            self._open()
        cap = self.capacity
        if nbytes > cap:
            raise LaneError(f"a {nbytes}-byte payload cannot be in a {cap}-byte lane")
        pos = self._cursor % cap
        if pos + nbytes > cap:
            self._cursor += cap - pos
            pos = 0
        self._start = self._cursor
        self._cursor += nbytes
        self.kept = False
        return self._data[pos : pos + nbytes]

    def hold(self) -> int:
        """Keep the payload last taken in the ring after ``release``; returns the token for ``drop``."""
        with self._lock:
            self._held[self._start] = None
        self.kept = True
        return self._start

    def release(self) -> None:
        """Done with the payload from ``take`` (or holding it): the writer may reuse the bytes before it."""
        with self._lock:
            self._released = self._cursor
            self._publish()

    def drop(self, token: int) -> None:
        """A held payload was copied out: its bytes (and those after it, up to the next held one) are free."""
        with self._lock:
            del self._held[token]
            self._publish()

    def _publish(self) -> None:
        # (lock held) The writer may reuse everything before the oldest held payload.
        self._consumed[0] = next(iter(self._held)) if self._held else self._released

    def _open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError as exc:
            raise LaneError(f"cannot open the shared-memory lane {self.path}: {exc}") from None
        try:
            if os.fstat(fd).st_size != _CONTROL + self.capacity:
                raise LaneError(f"the shared-memory lane {self.path} has the wrong size")
            self._map_file(fd)
        finally:
            os.close(fd)
        Path(self.path).unlink(missing_ok=True)  # both ends have it mapped: it goes away with them


__all__ = ["LANE_MIN", "LaneError", "LaneReader", "LaneWriter", "NO_KEY", "host_key", "lane_path"]
