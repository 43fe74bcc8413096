"""The fast paths of blocking operations with one peer whose link this thread already holds.

An iterative program exchanges messages with the same few peers over and
over, and after its first wait on a peer the link stays *held*
(``waiting.py``): the progress thread does not read it, the waiting thread
does. For the next blocking receive from that peer the general wait
(``Waiter.block``: find and hold the links of a set of operations, poll them all
and a bell, re-check under the lock after every read) is mostly bookkeeping
that can be skipped, and on a small message that bookkeeping is most of the
receive's CPU time. Two fast paths skip it:

* ``wait``: a blocking receive, or a blocking send that completes on
  the peer's acknowledgement (a large one), which arrives on the same link;
* ``exchange``: a blocking exchange (send to the peer, receive from
  it), the step of most collective algorithms: posting the receive and
  claiming the link take one hold of the engine lock instead of two, and
  the same read loop waits for the reply and, for a large send, for its
  acknowledgement.

Both claim the reader role under the engine lock only if the link is still
held and healthy, then poll that link and the bell (spinning first, as
every wait does: ``spinning.py``) and read the link themselves under the
stream's ``rx_lock``, as ``Waiter`` does; frames go through the same
assembler and delivery code (so matching order is the matcher's, as ever).
Anything unusual (the bell rang: another thread's op completed, a failover
or a fatal error; a read failed) ends the fast path, and the caller
finishes with the general wait, which sorts it out. Waits under hang
diagnosis (``FMPI_TIMEOUT``) always take the general path, which keeps its
records.
"""

from __future__ import annotations

import time
from typing import Callable

from ..core import Core
from ..peers import Peer, PeerState
from ..requests import Op, RecvOp, SendOp, TransportError
from ..sending import Sender
from ..spinning import spin_poll
from ..waiting import Waiter
from .link import Link


class HeldLinks:
    """The fast paths (they own nothing: the reader role is the core's, the held links the waiter's)."""

    def __init__(self, core: Core, waiter: Waiter, sender: Sender, wait: Callable[[Op], None]) -> None:
        self._core = core
        self._waiter = waiter
        self._sender = sender
        self._wait = wait  # the general wait (``Engine.wait``), which takes over where a fast path stops

    def wait(self, op: RecvOp | SendOp, rank: int, deadline: float | None) -> None:
        """Wait for `op` on the held link to `rank` (its source or its destination), as far as the fast
        path goes (the caller checks ``op.done``).

        Raises ERR_TIMEOUT once `deadline` (``time.monotonic``) passes.
        """
        core = self._core
        peer = core.peers.get(rank)
        link = peer.link if peer is not None else None
        if link is None:
            return
        with core.lock:
            if not self._may_hold(peer, link):
                return
            core.wake.claim((link,))
        try:
            self._read(link, op, deadline)
        finally:
            self._waiter.give_back((link,))

    def exchange(
        self, peer: Peer, link: Link, context: int, tag: int, parts: list[memoryview], buffer: memoryview | None
    ) -> RecvOp | None:
        """Send `parts` to `peer` and receive its message (into `buffer`) on `link`; the completed receive.

        None when the fast path does not apply (then nothing was done). As a
        blocking exchange it raises the receive's and the send's errors.
        """
        core = self._core
        recv = RecvOp(context, peer.rank, tag, buffer)
        with core.lock:
            if not self._may_hold(peer, link):
                return None
            msg = core.matcher.take_or_post(recv)
            if msg is None:
                core.wake.claim((link,))
            else:  # the peer's message came first (the last read took it with the one before)
                credit = core.take_arrived(recv, msg)
        send = SendOp(peer.rank, len(parts[0]) if len(parts) == 1 else sum(map(len, parts)), False)
        if msg is not None:
            self._sender.took(msg, credit)
            self._sender.push_message(peer, send, tag, context, parts)
        else:
            try:
                self._sender.push_message(peer, send, tag, context, parts)
                self._read(link, recv, None, send)
            finally:
                self._waiter.give_back((link,))
        if not recv.done or recv.error is not None:
            self._wait(recv)  # (it raises the error of a receive that is done)
        if not send.done or send.error is not None:
            self._wait(send)
        return recv

    def _may_hold(self, peer: Peer, link: Link) -> bool:
        """(lock held) This thread may read `link` on a fast path now."""
        core = self._core
        return (
            core.wake.reader is None and core.fatal is None and link in self._waiter.held
            and peer.state is PeerState.LINKED and not link.retired and link.read_failure is None
        )

    def _read(self, link: Link, op: RecvOp | SendOp, deadline: float | None, send: SendOp | None = None) -> None:
        """Read `link` (its reader role claimed) until `op` (and `send`, when given) completes or something
        unusual happens."""
        bell = self._core.wake.bell
        poller, _ = link.wait_poller(bell)
        ms = None
        # Waiting for a send alone (``wait`` on a send, or an exchange whose reply is in) is
        # waiting for its acknowledgement: read no further than that (``Link.on_readable``).
        ack_only = op.__class__ is SendOp
        while not op.done or send is not None and not send.done:
            if op.done:
                ack_only = True
            if deadline is not None:
                ms = int((deadline - time.monotonic()) * 1000 + 1)
                if ms <= 0:
                    raise TransportError("wait timed out", "ERR_TIMEOUT")
            for fd, _event in spin_poll(poller, ms, self._waiter.spin):
                if fd == bell:
                    return  # (the general wait drains the bell and looks at what changed)
                self._waiter.read_link_here(link, ack_only)
                if link.retired or link.read_failure is not None:
                    return  # (the progress thread took the link over)
