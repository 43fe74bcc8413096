"""The fast path of a blocking receive: one peer, whose link this thread already holds.

An iterative program receives from the same few peers over and over, and
after its first wait on a peer the link stays *held* (``waiting.py``): the
progress thread does not read it, the waiting thread does. For the next
blocking receive from that peer the general wait (``_block``: find and hold
the links of a set of operations, poll them all and a bell, re-check under
the lock after every read) is mostly bookkeeping that can be skipped, and on
a small message that bookkeeping is most of the receive's CPU time.

``_wait_held`` claims the reader role under the engine lock only if the
link is still held and healthy, then polls that link and the bell (spinning
first, as every wait does: ``spinning.py``) and reads the link itself under
the stream's ``rx_lock``, as ``_read_until`` does; frames go through the
same assembler and delivery code (so matching order is the matcher's, as
ever). Anything unusual (the bell rang: another thread's op completed, a
failover or a fatal error; a read failed) ends the fast path, and the
caller finishes with the general wait, which sorts it out. Waits under
hang diagnosis (``FMPI_TIMEOUT``) always take the general path, which keeps
its records.
"""

from __future__ import annotations

import threading
import time

from .peers import PeerState
from .requests import RecvOp, TransportError
from .spinning import spin_poll


class HeldReceiveMixin:
    """(It uses the waiting half's reader state: ``_reader``, ``_reading``, ``_held``, the bell.)"""

    def _wait_held(self, op: RecvOp, deadline: float | None) -> None:
        """Wait for `op` on its peer's held link, as far as the fast path goes (the caller checks ``op.done``).

        Raises ERR_TIMEOUT once `deadline` (``time.monotonic``) passes.
        """
        peer = self._peers.get(op.source)
        link = peer.link if peer is not None else None
        if link is None:
            return
        with self._lock:
            if (
                self._reader is not None or self._fatal is not None or link not in self._held
                or peer.state is not PeerState.LINKED or link.retired or link.read_failure is not None
            ):
                return
            self._reader = threading.get_ident()
            self._reading = (link,)
            self._reader_woken = False
        try:
            bell = self._reader_bell
            poller, _ = link.wait_poller(bell)
            ms = None
            while not op.done:
                if deadline is not None:
                    ms = int((deadline - time.monotonic()) * 1000 + 1)
                    if ms <= 0:
                        raise TransportError("wait timed out", "ERR_TIMEOUT")
                for fd, _event in spin_poll(poller, ms, self._spin):
                    if fd == bell:
                        return  # (the general wait drains the bell and looks at what changed)
                    self.read_link_here(link)
                    if link.retired or link.read_failure is not None:
                        return  # (the progress thread took the link over)
        finally:
            self._give_back((link,))
