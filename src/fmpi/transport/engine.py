"""The progress engine: point-to-point messages between the ranks of one job.

One daemon thread per rank (``progress.ProgressLoop``) sleeps in epoll on
every link, the listening socket, the relay connection and a wake-up pipe;
it never polls, so an idle rank costs no CPU. Sends are written directly by
the calling thread while the carrier's queue is empty; only what the kernel
cannot take right away is handed to the progress thread.

A thread that blocks for a message reads the link itself rather than
waiting for the progress thread to hand the message over (``waiting.py``).

Each peer has one reliable, ordered stream of frames (``stream.Stream``:
sequence numbers, cumulative ACKs, resending) over one *carrier* at a time:

* a TCP link made by plain connect (``direct``) or by hole punching
  (``punched``), set up lazily on the first message (``links.linkup.Linker``);
* the relay (``relayed``): fmpi frames cut into FORWARD chunks
  (``relay_channel``), when punching is impossible or failed.

A TCP link that dies without the peer's BYE (reset, or silent for
``link_timeout``) *fails over*: both ends detach it, say RESUME through the
relay with the next sequence number they expect, and resend from there on
the relay. No message is lost, duplicated or reordered, and the program sees
nothing. With no relay (engines wired by hand, as in tests), a dead link
fails the peer as before.

The engine is a facade over parts that each own their fields, sharing only
``core.Core`` (the lock, peers, matcher, loop; its docstring has the lock
order): ``sending.Sender``, ``receiving.Receiver`` (the frame sink),
``waiting.Waiter`` (blocking waits), ``held_link.HeldLinks`` (their fast
paths, ``links/``), ``carriers.Carriers`` (what carries each pair, failover),
``relayed.Relayed`` (the relay connection) and ``links.linkup.Linker``.
"""

from __future__ import annotations

import socket
import sys
import time
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, Sequence

from ..wire.relay_protocol import Kind as RelayKind
from . import hang
from .carriers import Carriers
from .core import Core, RelayHandler
from .finalize import finalize
from .links.held_link import HeldLinks
from .links.directory import Directory
from .links.linkup import Linker
from .links.shm_lane import NO_KEY, host_key
from .inbox import Inboxes
from .matching import ANY_SOURCE
from .next_call import NextCall
from .options import TransportOptions
from .peers import PeerState
from .progress import READ
from .receiving import Receiver
from .relay_line import RelayLine
from .relayed import Relayed
from .requests import Op, RecvOp, SendOp, TransportError
from .routes import PeerAddress
from .sending import Sender
from .waiting import Waiter

Endpoint = tuple[str, int]


class Engine:
    """Point-to-point message passing between the ranks of one job."""

    def __init__(
        self,
        rank: int,
        size: int,
        secret: bytes,
        endpoints: Callable[[int], Sequence[Endpoint]] | None,
        listener: socket.socket | None,
        *,
        connect_timeout: float = 10.0,
        retry_after_tie: float = 2.0,
        options: TransportOptions | None = None,
        me: PeerAddress | None = None,
        local_addr: Endpoint | None = None,
    ) -> None:
        options = options or TransportOptions(connect_timeout=connect_timeout, retry_after_tie=retry_after_tie)
        self.rank = rank
        self.size = size
        self.options = options
        # Sent in every handshake: peers with the same key get shared-memory lanes (shm_lane.py).
        self.host_key = host_key() if options.lane_capacity else NO_KEY
        core = self.core = Core(rank, size, options, f"fmpi-progress-{rank}")
        self._sender = Sender(core)
        carriers = self._carriers = Carriers(core, self._sender)
        # With this rank's own record (`me`), peers' routes are planned from their records, looked up through
        # the relay when first needed; without it, from `endpoints` (a plain connect).
        directory = Directory(core, me, endpoints, self._sender.want_write, local_addr)
        self._linker = Linker(core, carriers, self._sender.via_relay, secret, self.host_key, directory, local_addr)
        self._receiver = Receiver(
            core, self._sender, carriers.on_resume, self._linker.on_punch_request, self._diagnose
        )
        carriers.attach(self._receiver, self._linker)
        self._relayed = Relayed(core, self._sender, self._receiver, carriers, self._linker.on_peers, directory.ask_again)
        self.waiter = Waiter(core, self._receiver, self._sender, lambda link: carriers.on_link_event(link, READ))
        self.waits = self.waiter.waits  # what each blocked thread waits for (FMPI_TIMEOUT diagnosis)
        self._held = HeldLinks(core, self.waiter, self._sender, self.wait)
        self.next_call = NextCall()  # run at the program's next call into the engine (next_call.py)
        self.inboxes = Inboxes(core, self._sender, self.next_call.serving)  # contexts served where read (inbox.py)
        # statistics: bytes sent and received, one record per link made, peers linked and looked up (core.py)
        self.traffic, self.link_stats, self.link_summary = core.traffic, core.link_stats, core.link_summary
        self.looked_up = self._linker.directory.looked_up  # the peers whose records the rendezvous gave
        core.loop.on_stop = self._on_loop_stop
        self._listener = listener
        if listener is not None:
            listener.setblocking(False)
            core.loop.call_soon(lambda: core.loop.register(listener, READ, self._on_acceptable))

    # ================================================================ messages
    def isend(self, dest: int, context: int, tag: int, parts: list[memoryview], sync: bool = False) -> SendOp:
        """Start sending `parts` (contiguous byte views, not copied) as one message."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        nbytes = len(parts[0]) if len(parts) == 1 else sum(len(p) for p in parts)
        op = SendOp(dest, nbytes, sync)
        if dest == self.rank:
            self._sender.to_self(op, context, tag, parts, nbytes)
            return op
        core = self.core
        peer = core.peers.get(dest)
        if peer is None or peer.state is not PeerState.LINKED or core.fatal is not None:
            # (a linked peer needs nothing here: if it fails meanwhile, its stream fails the op)
            with core.lock:
                core.check_fatal()
                peer = core.peer(dest)
                if peer.error is not None and not peer.stream.discards(op):
                    raise peer.error
                if peer.state is PeerState.NONE or (peer.state is PeerState.SETUP and not peer.planned):
                    self._linker.need(peer)
        self._sender.push_message(peer, op, tag, context, parts)
        return op

    def irecv(self, source: int, context: int, tag: int, buffer: memoryview | None) -> RecvOp:
        """Post a receive into `buffer` (bytes view), or into a fresh bytearray when None."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        op = RecvOp(context, source, tag, buffer)
        core = self.core
        with core.lock:
            core.check_fatal()
            peer = None if source == ANY_SOURCE or source == self.rank else core.peers.get(source) or core.peer(source)
            msg = core.matcher.take_or_post(op)
            if msg is None:
                if peer is not None and peer.error is not None:  # (nothing came from it before it failed)
                    core.matcher.unpost(op)
                    raise peer.error
                return op
            credit = core.take_arrived(op, msg)
        self._sender.took(msg, credit)
        return op

    def sendrecv(
        self, dest: int, source: int, context: int, tag: int, parts: list[memoryview], buffer: memoryview | None
    ) -> RecvOp:
        """Send `parts` to `dest` and receive from `source` (into `buffer`; None: a new bytearray), both
        under `context` and `tag`; returns the completed receive.

        The exchange step of most collective algorithms. The receive is posted
        first, so the reply can land in `buffer` directly; a small send
        completes as it is written, and then the receive alone is waited for
        (on the held-link fast path, where it applies).
        """
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        if dest == source and self.options.op_timeout is None:
            peer = self.core.peers.get(dest)
            link = peer.link if peer is not None else None
            if link is not None:
                recv = self._held.exchange(peer, link, context, tag, parts, buffer)
                if recv is not None:
                    return recv
        recv = self.irecv(source, context, tag, buffer)
        send = self.isend(dest, context, tag, parts)
        if send.done:
            self.wait(recv)
            if send.error is not None:
                raise send.error
        else:
            self.wait_all((recv, send))
        return recv

    def iprobe(self, source: int, context: int, tag: int) -> tuple[int, int, int] | None:
        """(source, tag, nbytes) of the first matching arrived message, left in place."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        pattern = RecvOp(context, source, tag, None)
        core = self.core
        with core.lock:
            core.check_fatal()
            msg = core.matcher.find_unexpected(pattern)
            return None if msg is None else (msg.source, msg.tag, msg.nbytes)

    def probe(self, source: int, context: int, tag: int, timeout: float | None = None) -> tuple[int, int, int]:
        """(source, tag, nbytes) of the first matching message, once one has arrived (left in place)."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        pattern = RecvOp(context, source, tag, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        core = self.core
        with core.lock:
            while True:
                core.check_fatal()
                msg = core.matcher.find_unexpected(pattern)
                if msg is not None:
                    return msg.source, msg.tag, msg.nbytes
                if source != ANY_SOURCE and source != self.rank:
                    peer = core.peer(source)
                    if peer.error is not None:
                        raise peer.error
                core.wake.sleep(deadline, "probe")

    # ================================================================ waiting
    def wait(self, op: Op, timeout: float | None = None) -> None:
        """Block until `op` completes; raises its error."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        if not op.done:
            timeout = self._try_held(op, timeout)
            if not op.done:
                self.waiter.block(lambda: op.done, (op,), timeout, "wait")
        if op.error is not None:
            raise op.error

    def wait_any(self, ops: Sequence[Op], timeout: float | None = None) -> int:
        """Index of a completed op (the first in order); blocks until one completes."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        while True:
            for i, op in enumerate(ops):
                if op.done:
                    return i
            self.waiter.block(lambda: any(op.done for op in ops), ops, timeout, "wait_any")

    def wait_all(self, ops: Iterable[Op], timeout: float | None = None) -> None:
        """Block until every op completes; raises the first error among them."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        ops = list(ops)
        if not _all_done(ops):
            pending = [op for op in ops if not op.done]
            if len(pending) == 1:  # (a sendrecv whose send went out at once: a single receive)
                timeout = self._try_held(pending[0], timeout)
            if not _all_done(ops):
                self.waiter.block(lambda: _all_done(ops), ops, timeout, "wait_all")
        for op in ops:
            if op.error is not None:
                raise op.error

    def _try_held(self, op: Op, timeout: float | None) -> float | None:
        """Wait for a receive, or a send's acknowledgement, on its peer's held link (links/held_link.py) as far
        as that fast path goes; returns what is left of `timeout` for the general wait that takes over
        where it stops."""
        if isinstance(op, RecvOp):
            rank = op.source
        elif isinstance(op, SendOp):
            rank = op.dest
        else:
            return timeout
        if timeout is None and self.options.op_timeout is not None:
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        self._held.wait(op, rank, deadline)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def blocked_elsewhere(self, what: str) -> AbstractContextManager[float | None]:
        """Around a wait outside the engine (``Waiter.blocked_elsewhere``)."""
        if self.next_call.pending:  # (next_call.py)
            self.next_call.run()
        return self.waiter.blocked_elsewhere(what)

    def timed_out_elsewhere(self, what: str) -> TransportError:
        """FMPI_TIMEOUT expired in a wait outside the engine (``Waiter.hung_in``)."""
        return self.waiter.hung_in(what)

    def _diagnose(self, asker: int) -> None:
        """A peer asks what this rank waits for (hang diagnosis): print it."""
        hang.report(self.rank, self.waits.describe(), asker=asker)

    # ================================================================ operations
    def cancel(self, op: Op) -> bool:
        """Cancel a receive that has not matched yet. Sends cannot be cancelled once started."""
        if not isinstance(op, RecvOp):
            return False
        core = self.core
        with core.lock:
            if op.done or not core.matcher.unpost(op):
                return False
            op.cancelled = True
            core.complete_locked(op)
            return True

    def new_op(self) -> Op:
        """An op completed by code above the transport (e.g. a collective running in the background)."""
        return Op()

    def finish_op(self, op: Op, error: TransportError | None = None) -> None:
        """Complete an op from ``new_op``; waiters on it (wait, wait_any) wake up."""
        with self.core.lock:
            op.error = error
            self.core.complete_locked(op)

    def fail(self, error: TransportError) -> None:
        """Fail every pending and future operation (job aborted, relay lost, ...)."""
        core = self.core
        with core.lock:
            if core.fatal is None:
                core.fatal = error
            core.wake.notify_locked()

    # ================================================================ the relay
    def attach_relay(self, line: RelayLine, handler: RelayHandler) -> None:
        """Use `line` (the rank's line to the relay, see relay_line.py) for control, punching and relayed links."""
        self._relayed.attach_relay(line, handler)

    def replace_relay(self, line: RelayLine) -> None:
        """The job's relay restarted and this rank registered again on `line` (``Relayed.replace_relay``)."""
        self._relayed.replace_relay(line)

    def has_relay(self) -> bool:
        return self.core.relay is not None

    @property
    def relay(self) -> RelayLine | None:
        return self.core.relay

    def relay_send(self, kind: RelayKind, body: dict[str, Any], flush_timeout: float = 2.0) -> None:
        """A control frame to the relay (thread-safe); written at once if the progress thread is gone."""
        self._relayed.relay_send(kind, body, flush_timeout)

    # ================================================================ stopping
    def close(self, timeout: float = 30.0) -> None:
        """Finalize: deliver everything sent (until acknowledged), say BYE to every peer, stop."""
        if self.core.loop.stopped:
            return
        finalize(self.core, self._sender, timeout)
        self._stop_loop()

    def abandon(self) -> None:
        """Stop at once without saying goodbye (abort path)."""
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._linker.stop()
        self.core.loop.stop()
        self.core.pool.shutdown(wait=False, cancel_futures=True)

    def _on_acceptable(self, _mask: int) -> None:
        """Progress thread: the listener has a connection for the linker."""
        try:
            sock, _addr = self._listener.accept()  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            print(f"fmpi: rank {self.rank}: accept failed: {exc}", file=sys.stderr)
            return
        self._linker.accepted(sock)

    def _on_loop_stop(self) -> None:
        """Last act of the progress thread: close links and the listener (the relay stays open)."""
        core = self.core
        relay_sock = core.relay.sock if core.relay is not None else None
        for fileobj in core.loop.registered():
            if fileobj is not relay_sock and isinstance(fileobj, socket.socket):
                fileobj.close()
        if self._listener is not None:
            self._listener.close()
        with core.lock:
            links = core.links()
            core.wake.notify_locked()  # a thread still waiting learns the loop is gone
        for link in links:
            link.close_lanes()
        with core.lock:
            core.wake.close()


def _all_done(ops: list[Op]) -> bool:
    # (a loop, not all() over a generator: this runs several times per blocking wait)
    for op in ops:
        if not op.done:
            return False
    return True
