"""Blocking waits, in which the waiting thread reads its links itself.

A small message's latency is mostly thread hand-offs: if the progress thread
reads the frame, it must then wake the thread that waits for it (a second
context switch, and the GIL passed back and forth). So a thread that blocks
in ``wait``/``wait_any``/``wait_all`` on operations with peers reached over
TCP *holds* those links: the progress thread stops watching them for data
(``ProgressLoop.pause_read``) and the waiting thread sleeps in ``poll`` on
them and on an eventfd (the *bell*) that any other completion rings. The
message then wakes exactly one thread, the one that wants it.

Holds are sticky: a link stays held for ``HOLD_IDLE`` seconds (at most
``HOLD_IDLE + HOLD_CHECK``) after its last waiter leaves, because an
iterative program waits on the same peers again a few microseconds later,
and handing the link back and forth would cost two ``epoll_ctl`` calls and,
worse, let the progress thread grab the next message first. A timer on the progress thread hands idle held links back,
so a rank that computes for a while still acknowledges, notices failures
and drains its sockets. The next wait on a held link from a single peer
takes a shorter road (``links/held_link.py``).

One thread at a time reads this way; other waiting threads sleep on the
engine's condition, and the reader wakes them when it completes their ops.
Reading a link is serialised with the progress thread by its stream's
``rx_lock``.
"""

from __future__ import annotations

import os
import select
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

from ..wire.rank_frames import FrameError
from . import hang
from .core import Core
from .links.link import Link, PeerClosed
from .matching import ANY_SOURCE
from .peers import PeerState
from .receiving import Receiver
from .requests import Op, RecvOp, SendOp, TransportError
from .sending import Sender
from .spinning import SpinBudget, spin_poll

# A held link goes back to the progress thread after this long without a waiter ...
HOLD_IDLE = 0.002
# ... as seen by a check this often (each check wakes the progress thread, which then takes
# the GIL from the computing thread: checking every HOLD_IDLE cost a busy rank 500 wake-ups a second).
HOLD_CHECK = 0.02
_POLLIN = select.POLLIN


class Waiter:
    """Blocking waits: which thread reads which link, and the general wait over any set of operations.
    It owns the held links, the hang-diagnosis records and the spin budget."""

    def __init__(
        self, core: Core, receiver: Receiver, sender: Sender, on_read_failure: Callable[[Link], None]
    ) -> None:
        self._core = core
        self._receiver = receiver
        self._sender = sender
        self._on_read_failure = on_read_failure  # the progress thread takes a link a read failed on
        self.waits = hang.WaitRegistry()  # what each blocked thread waits for (FMPI_TIMEOUT diagnosis)
        self.held: set[Link] = set()  # links paused in the progress thread for waiting readers
        self._hold_timer = False
        self.spin = SpinBudget(core.options.spin, core.options.spin_yield)  # how long a wait polls before it sleeps

    # ------------------------------------------------------------ blocking
    def block(self, ready: Callable[[], bool], ops: Sequence[Op], timeout: float | None, what: str) -> None:
        """Return once ready() holds; raises ERR_TIMEOUT after `timeout` (else FMPI_TIMEOUT) and the engine's fatal error."""
        core = self._core
        hang_check = timeout is None and core.options.op_timeout is not None
        if hang_check:
            timeout = core.options.op_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        ident = self.waits.enter(ops) if hang_check else 0  # (only FMPI_TIMEOUT jobs are ever asked)
        try:
            links = self._take_links(ops)
            if not links:
                with core.lock:
                    while not ready():
                        core.check_fatal()
                        if core.loop.stopped:
                            raise TransportError(f"{what}: this rank's transport has stopped", "ERR_OTHER")
                        core.wake.sleep(deadline, what)
                return
            try:
                self._read_until(ready, ops, links, deadline, what)
            finally:
                self.give_back(links)
        except TransportError as exc:
            if hang_check and exc.error_class == "ERR_TIMEOUT":
                raise self.hung(ops) from None
            raise
        finally:
            if hang_check:
                self.waits.leave(ident)

    @contextmanager
    def blocked_elsewhere(self, what: str) -> Iterator[float | None]:
        """Around a wait outside the engine (a server-side collective): yields FMPI_TIMEOUT's deadline
        (None: no timeout), and hang diagnosis reports the thread as waiting in `what` meanwhile."""
        t = self._core.options.op_timeout
        if t is None:
            yield None
            return
        ident = self.waits.enter_elsewhere(what)
        try:
            yield time.monotonic() + t
        finally:
            self.waits.leave(ident)

    def timed_out_elsewhere(self, what: str) -> TransportError:
        """FMPI_TIMEOUT expired in a wait outside the engine: as ``hung``."""
        return self.hung_in(what)

    def hung(self, ops: Sequence[Op]) -> TransportError:
        """FMPI_TIMEOUT expired: have every rank print its state, then fail with our own."""
        pending = [op for op in ops if not op.done]
        return self.hung_in("; ".join(self.waits.describe_op(op) for op in pending))

    def hung_in(self, what: str) -> TransportError:
        """FMPI_TIMEOUT expired in `what`: as ``hung``."""
        core = self._core
        t = core.options.op_timeout
        hang.report(core.rank, [f"FMPI_TIMEOUT: waited {t:g} s in {what}"])
        if core.relay is not None:
            with core.lock:
                peers = [core.peer(rank) for rank in range(core.size) if rank != core.rank]
            for peer in peers:
                self._sender.via_relay(peer, "diagnose")
            time.sleep(hang.ANSWER_GRACE)  # (their lines reach the launcher before our failure ends the job)
        return TransportError(
            f"{what} did not complete within FMPI_TIMEOUT={t:g} s (every rank's state is printed above)", "ERR_TIMEOUT"
        )

    def _take_links(self, ops: Sequence[Op]) -> tuple[Link, ...]:
        """Hold the TCP links the pending `ops` wait on, for this thread to read ((): sleep on the condition)."""
        core = self._core
        with core.lock:
            if core.wake.reader is not None or core.fatal is not None or core.loop.stopped:
                return ()
            ranks: Iterable[int]
            if len(ops) == 1 and isinstance(ops[0], RecvOp) and ops[0].source != ANY_SOURCE:
                ranks = (ops[0].source,)  # the common case, a blocking receive
            else:
                ranks = set()
                for op in ops:
                    if op.done:
                        continue
                    if isinstance(op, RecvOp):
                        if op.source == ANY_SOURCE:
                            ranks.update(core.peers)
                        else:
                            ranks.add(op.source)
                    elif isinstance(op, SendOp):
                        ranks.add(op.dest)
            taken = []
            for rank in ranks:
                peer = core.peers.get(rank)
                if peer is None or peer.state is not PeerState.LINKED or peer.link is None:
                    continue
                link = peer.link
                if link not in self.held:
                    if link.retired or not core.loop.pause_read(link.sock):
                        continue
                    self.held.add(link)
                    if not self._hold_timer:
                        self._hold_timer = True
                        core.loop.call_later(HOLD_CHECK, self._release_idle)
                taken.append(link)
            if taken:
                core.wake.claim(tuple(taken))
            return tuple(taken)

    def give_back(self, links: tuple[Link, ...]) -> None:
        core = self._core
        now = time.monotonic()
        with core.lock:
            core.wake.release()
            for link in links:
                link.idle_since = now
        for link in links:
            stream = core.peers[link.peer].stream
            if stream.recv_next > stream.acked_out and not stream.ack_timer:
                self._receiver.ack(link.peer, from_timer=False)  # arm the delayed ACK for what we read

    def _release_idle(self) -> None:
        """Progress thread: hand back held links no thread has waited on for HOLD_IDLE."""
        core = self._core
        now = time.monotonic()
        with core.lock:
            for link in list(self.held):
                if link.retired:
                    self.held.discard(link)
                elif link not in core.wake.reading and now - link.idle_since >= HOLD_IDLE:
                    self.held.discard(link)
                    core.loop.resume_read(link.sock)
            if self.held:
                core.loop.call_later(HOLD_CHECK, self._release_idle)
            else:
                self._hold_timer = False

    def _read_until(
        self, ready: Callable[[], bool], ops: Sequence[Op], links: tuple[Link, ...], deadline: float | None, what: str
    ) -> None:
        core = self._core
        bell = core.wake.bell
        if len(links) == 1:
            poller, watched = links[0].wait_poller(bell)
        else:
            poller, watched = select.poll(), {}
            poller.register(bell, _POLLIN)
            for link in links:
                fd = link.fileno()
                if fd >= 0:  # (-1: closed just now; the progress thread takes it from here)
                    poller.register(fd, _POLLIN)
                    watched[fd] = link
        ms = None
        while True:
            if ready():
                return
            with core.lock:
                if ready():
                    return
                core.check_fatal()
                if core.loop.stopped:
                    raise TransportError(f"{what}: this rank's transport has stopped", "ERR_OTHER")
                core.wake.woken = False
                for fd in [fd for fd, link in watched.items() if link.retired or link.read_failure is not None]:
                    # The link went to the progress thread (failover, failure): from
                    # now on it delivers what this pair sends, and rings the bell.
                    del watched[fd]
                    _forget(poller, fd)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(f"{what} timed out", "ERR_TIMEOUT")
                ms = max(1, int(remaining * 1000 + 1))
            # Only sends left to wait for: only their acknowledgements are awaited (``Link.on_readable``).
            ack_only = all(op.done or op.__class__ is SendOp for op in ops)
            for fd, _event in spin_poll(poller, ms, self.spin):
                link = watched.get(fd)
                if link is not None:
                    self.read_link_here(link, ack_only)
                elif fd == bell:
                    try:
                        os.eventfd_read(bell)
                    except BlockingIOError:
                        pass
                else:
                    _forget(poller, fd)  # a link we no longer read (closed under us)

    def read_link_here(self, link: Link, ack_only: bool = False) -> None:
        """Read what `link` has on the calling (waiting) thread; failures go to the progress thread.

        `ack_only`: the caller waits only for an acknowledgement (``Link.on_readable``)."""
        core = self._core
        with core.peers[link.peer].stream.rx_lock:
            if link.retired or link.read_failure is not None:
                return
            try:
                link.on_readable(ack_only)
            except (PeerClosed, OSError, FrameError) as exc:
                link.read_failure = exc
        if link.read_failure is not None:
            core.loop.call_soon(lambda: self._on_read_failure(link))
        elif core.peers[link.peer].stream.ack_due() == "now":
            self._receiver.ack(link.peer, from_timer=False)


def _forget(poller: "select.poll", fd: int) -> None:
    try:
        poller.unregister(fd)
    except (KeyError, ValueError):
        pass
