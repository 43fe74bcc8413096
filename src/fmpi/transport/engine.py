"""The progress engine: links to peers, message matching, and the thread that drives them.

One daemon thread per rank sleeps in ``select`` (epoll) on every link, the
listening socket and a wake-up pipe — it never polls, so an idle rank costs
no CPU. Sends are written directly by the calling thread while a link's queue
is empty; only what the kernel cannot take right away is handed to the
progress thread. Links are made lazily, on the first message to a peer, so a
rank holds sockets only for the peers it actually talks to.

Link set-up (connect or accept, plus the authenticated handshake) runs on a
small thread pool: it is blocking code with timeouts, and a slow or hostile
connector can never stall the progress thread.

Locking: ``_lock`` guards peers, the matcher and op completion (and is the
lock of ``_cond``, which waiters sleep on). A link's own write lock is only
ever taken after ``_lock`` or alone, never the other way round.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import os
import selectors
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Sequence

from .frames import Flag, FrameError, Header, Kind
from .handshake import HandshakeError, Verdict, accept_side, connect_side, read_hello
from .link import Link, PeerClosed
from .matching import ANY_SOURCE, Matcher
from .requests import Arrived, Op, RecvOp, SendOp, TransportError

Endpoint = tuple[str, int]


class PeerState(enum.Enum):
    NONE = "no link"
    CONNECTING = "connecting"
    AWAITING = "waiting for the peer's connection"  # our attempt lost the tie
    ACCEPTING = "accepting"
    LINKED = "linked"
    GONE = "gone"


class _Peer:
    __slots__ = ("rank", "state", "link", "backlog", "error")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.state = PeerState.NONE
        self.link: Link | None = None
        # Messages sent before the link exists, in order: (context, source, tag, parts, nbytes, op)
        self.backlog: list[tuple] = []
        self.error: TransportError | None = None


class Engine:
    """Point-to-point message passing between the ranks of one job."""

    def __init__(
        self,
        rank: int,
        size: int,
        secret: bytes,
        endpoints: Callable[[int], Sequence[Endpoint]],
        listener: socket.socket | None,
        *,
        connect_timeout: float = 10.0,
        retry_after_tie: float = 2.0,
    ) -> None:
        self.rank = rank
        self.size = size
        self._secret = secret
        self._endpoints = endpoints
        self._connect_timeout = connect_timeout
        self._retry_after_tie = retry_after_tie
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._matcher: Matcher[RecvOp, Arrived] = Matcher()
        self._peers: dict[int, _Peer] = {}
        self._inflight: dict[int, tuple[RecvOp | None, memoryview | bytearray]] = {}
        self._fatal: TransportError | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"fmpi-link-{rank}")
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._todo: list[Callable[[], None]] = []
        self._todo_lock = threading.Lock()
        self._watched: set[socket.socket] = set()  # sockets the caller owns (never closed here)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = itertools.count()
        self._stopping = False
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        self._listener = listener
        if listener is not None:
            listener.setblocking(False)
            self._sel.register(listener, selectors.EVENT_READ, self._on_acceptable)
        self._thread = threading.Thread(target=self._run, name=f"fmpi-progress-{rank}", daemon=True)
        self._thread.start()

    # ================================================================ public API
    def isend(self, dest: int, context: int, tag: int, parts: list[memoryview], sync: bool = False) -> SendOp:
        """Start sending `parts` (contiguous byte views, not copied) as one message."""
        nbytes = sum(len(p) for p in parts)
        op = SendOp(dest, nbytes, sync)
        if dest == self.rank:
            self._deliver_to_self(op, context, tag, parts, nbytes)
            return op
        with self._lock:
            self._check_fatal()
            peer = self._peer(dest)
            if peer.error is not None:
                raise peer.error
            link = peer.link
            if peer.state is not PeerState.LINKED or peer.backlog:
                peer.backlog.append((context, tag, parts, nbytes, op))
                self._ensure_link(peer)
                return op
        self._send_on(link, op, context, tag, parts, nbytes)
        return op

    def irecv(self, source: int, context: int, tag: int, buffer: memoryview | None) -> RecvOp:
        """Post a receive into `buffer` (bytes view), or into a fresh bytearray when None."""
        op = RecvOp(context, source, tag, buffer)
        with self._lock:
            self._check_fatal()
            msg = self._matcher.find_unexpected(op, remove=True)
            if msg is None:
                if source != ANY_SOURCE:
                    peer = self._peer(source)
                    if peer.error is not None and source != self.rank:
                        raise peer.error
                self._matcher.post(op)
                return op
            self._fill(op, msg.source, msg.tag, msg.payload)
        self._matched_sync(msg.source, msg.sync)
        return op

    def iprobe(self, source: int, context: int, tag: int) -> tuple[int, int, int] | None:
        """(source, tag, nbytes) of the first matching arrived message, left in place."""
        pattern = RecvOp(context, source, tag, None)
        with self._lock:
            self._check_fatal()
            msg = self._matcher.find_unexpected(pattern, remove=False)
            return None if msg is None else (msg.source, msg.tag, len(msg.payload))

    def probe(self, source: int, context: int, tag: int, timeout: float | None = None) -> tuple[int, int, int]:
        pattern = RecvOp(context, source, tag, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                self._check_fatal()
                msg = self._matcher.find_unexpected(pattern, remove=False)
                if msg is not None:
                    return msg.source, msg.tag, len(msg.payload)
                if source != ANY_SOURCE and source != self.rank:
                    peer = self._peer(source)
                    if peer.error is not None:
                        raise peer.error
                self._sleep(deadline, "probe")

    def wait(self, op: Op, timeout: float | None = None) -> None:
        """Block until `op` completes; raises its error."""
        if not op.done:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._lock:
                while not op.done:
                    self._check_fatal()
                    self._sleep(deadline, "wait")
        if op.error is not None:
            raise op.error

    def wait_any(self, ops: Sequence[Op], timeout: float | None = None) -> int:
        """Index of a completed op (the first in order); blocks until one completes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                for i, op in enumerate(ops):
                    if op.done:
                        return i
                self._check_fatal()
                self._sleep(deadline, "wait_any")

    def wait_all(self, ops: Iterable[Op], timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        ops = list(ops)
        with self._lock:
            while not all(op.done for op in ops):
                self._check_fatal()
                self._sleep(deadline, "wait_all")
        for op in ops:
            if op.error is not None:
                raise op.error

    def cancel(self, op: Op) -> bool:
        """Cancel a receive that has not matched yet. Sends cannot be cancelled once started."""
        if not isinstance(op, RecvOp):
            return False
        with self._lock:
            if op.done or not self._matcher.unpost(op):
                return False
            op.cancelled = True
            self._complete_locked(op)
            return True

    def new_op(self) -> Op:
        """An op completed by code above the transport (e.g. a collective running in the background)."""
        return Op()

    def finish_op(self, op: Op, error: TransportError | None = None) -> None:
        """Complete an op from ``new_op``; waiters on it (wait, wait_any) wake up."""
        with self._lock:
            op.error = error
            self._complete_locked(op)

    def fail(self, error: TransportError) -> None:
        """Fail every pending and future operation (job aborted, relay lost, ...)."""
        with self._lock:
            if self._fatal is None:
                self._fatal = error
            self._cond.notify_all()

    def watch(self, sock: socket.socket, on_readable: Callable[[], None]) -> None:
        """Let the progress thread call `on_readable` when `sock` has data (e.g. the relay's control link)."""
        self._watched.add(sock)
        self._run_in_loop(lambda: self._sel.register(sock, selectors.EVENT_READ, lambda _mask: on_readable()))

    def unwatch(self, sock: socket.socket) -> None:
        self._run_in_loop(lambda: self._safe_unregister(sock))

    def link_summary(self) -> dict[str, int]:
        with self._lock:
            states = [p.state for p in self._peers.values()]
        return {s.name.lower(): states.count(s) for s in PeerState if states.count(s)}

    def close(self, timeout: float = 30.0) -> None:
        """Finalize: let queued sends drain, say BYE on every link, and stop the progress thread."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._fatal is None and any(
                p.backlog or (p.link is not None and p.link.has_queued()) for p in self._peers.values()
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    print(f"fmpi: rank {self.rank}: finalize gave up on unsent messages", file=sys.stderr)
                    break
                self._cond.wait(remaining)
            links = [p.link for p in self._peers.values() if p.state is PeerState.LINKED and p.link is not None]
        for link in links:
            try:
                link.said_bye = True
                link.send_control(Kind.BYE)
                link.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        # Drain until every peer has closed its side too (bounded): closing with
        # unread bytes in the receive queue would make the kernel send RST.
        drain_deadline = time.monotonic() + 0.5
        with self._lock:
            while any(p.state is PeerState.LINKED for p in self._peers.values()):
                remaining = drain_deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        self._stop_loop()

    def abandon(self) -> None:
        """Stop at once without saying goodbye (abort path)."""
        self._stop_loop()

    # ============================================================ sending paths
    def _send_on(self, link: Link, op: SendOp, context: int, tag: int, parts: list[memoryview], nbytes: int) -> None:
        if link.send_data(context, self.rank, tag, parts, nbytes, op, op.sync):
            if not op.sync:
                self._complete(op)
        else:
            self._run_in_loop(lambda: self._want_write(link))

    def _acknowledge(self, source: int, seq: int) -> None:
        if source == self.rank:
            return  # self-sends complete on match directly, see _deliver_to_self
        with self._lock:
            link = self._peers[source].link
        if link is not None and not link.send_control(Kind.ACK, seq):
            self._run_in_loop(lambda: self._want_write(link))

    def _deliver_to_self(self, op: SendOp, context: int, tag: int, parts: list[memoryview], nbytes: int) -> None:
        payload = bytearray(nbytes)
        pos = 0
        for p in parts:  # the sender may reuse its buffer once this returns: copy
            payload[pos : pos + len(p)] = p
            pos += len(p)
        with self._lock:
            recv = self._matcher.take_posted(context, self.rank, tag)
            if recv is not None:
                self._fill(recv, self.rank, tag, payload)
            else:
                # A synchronous self-send completes when a receive matches it.
                self._matcher.add_unexpected(Arrived(context, self.rank, tag, payload, op if op.sync else None))
                if op.sync:
                    return
            self._complete_locked(op)

    # ============================================================ receive paths
    def frame_started(self, link: Link, header: Header) -> memoryview:
        with self._lock:
            recv = self._matcher.take_posted(header.context, link.peer, header.tag)
            dest: memoryview | bytearray
            if recv is not None and recv.buffer is not None and header.nbytes <= len(recv.buffer):
                dest = recv.buffer[: header.nbytes]
            else:
                dest = bytearray(header.nbytes)
            self._inflight[link.peer] = (recv, dest)
        if recv is not None and header.flags & Flag.SYNC:
            self._acknowledge(link.peer, header.seq)
        return dest if isinstance(dest, memoryview) else memoryview(dest)

    def frame_finished(self, link: Link, header: Header, payload: memoryview | None) -> None:
        if header.kind is Kind.ACK:
            op = link.take_sync(header.seq)
            if op is not None:
                self._complete(op)
            return
        if header.kind is Kind.BYE:
            link.heard_bye = True
            return
        sync_seq = header.seq if header.flags & Flag.SYNC else None
        with self._lock:
            recv, dest = self._inflight.pop(link.peer, (None, bytearray()))
            if recv is not None:
                if recv.buffer is not None and header.nbytes <= len(recv.buffer):
                    self._finish_recv(recv, link.peer, header.tag, header.nbytes)
                else:
                    self._fill(recv, link.peer, header.tag, dest)
                return
            recv = self._matcher.take_posted(header.context, link.peer, header.tag)
            if recv is None:
                self._matcher.add_unexpected(Arrived(header.context, link.peer, header.tag, dest, sync_seq))
                self._cond.notify_all()  # a probe may be waiting
                return
            self._fill(recv, link.peer, header.tag, dest)
        self._matched_sync(link.peer, sync_seq)

    def _fill(self, recv: RecvOp, source: int, tag: int, payload: bytearray | memoryview) -> None:
        """Complete `recv` from a whole payload (lock held)."""
        n = len(payload)
        if recv.buffer is None:
            recv.payload = payload
        elif n <= len(recv.buffer):
            recv.buffer[:n] = payload
        else:
            recv.error = TransportError(
                f"message truncated: {n} bytes from rank {source} (tag {tag}) do not fit a {len(recv.buffer)}-byte buffer",
                "ERR_TRUNCATE",
            )
        self._finish_recv(recv, source, tag, n)

    def _matched_sync(self, source: int, sync: int | SendOp | None) -> None:
        """A synchronous send was matched: tell its sender (or complete it, for a self-send)."""
        if isinstance(sync, SendOp):
            self._complete(sync)
        elif sync is not None:
            self._acknowledge(source, sync)

    def _finish_recv(self, recv: RecvOp, source: int, tag: int, nbytes: int) -> None:
        recv.status_source = source
        recv.status_tag = tag
        recv.nbytes = nbytes
        self._complete_locked(recv)

    # ============================================================ completion
    def _complete(self, op: Op) -> None:
        with self._lock:
            self._complete_locked(op)

    def _complete_locked(self, op: Op) -> None:
        op.done = True
        self._cond.notify_all()

    def _sleep(self, deadline: float | None, what: str) -> None:
        if deadline is None:
            self._cond.wait()
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransportError(f"{what} timed out", "ERR_TIMEOUT")
        self._cond.wait(remaining)

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # ============================================================ link set-up
    def _peer(self, rank: int) -> _Peer:
        peer = self._peers.get(rank)
        if peer is None:
            if not 0 <= rank < self.size:
                raise TransportError(f"invalid rank {rank} (job has {self.size} ranks)", "ERR_RANK")
            peer = self._peers[rank] = _Peer(rank)
        return peer

    def _ensure_link(self, peer: _Peer) -> None:
        if peer.state is PeerState.NONE:
            peer.state = PeerState.CONNECTING
            self._pool.submit(self._connect, peer.rank)

    def _connect(self, rank: int) -> None:
        errors = []
        for endpoint in self._endpoints(rank):
            sock = None
            try:
                sock = socket.create_connection(endpoint, timeout=self._connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                verdict = connect_side(sock, self._secret, self.rank, rank)
            except (OSError, HandshakeError) as exc:
                errors.append(f"{endpoint[0]}:{endpoint[1]}: {exc}")
                if sock is not None:
                    sock.close()
                if isinstance(exc, HandshakeError):
                    break
                continue
            if verdict is Verdict.ACCEPT:
                self._install(rank, sock)
                return
            sock.close()
            with self._lock:
                peer = self._peers[rank]
                if peer.state is PeerState.CONNECTING:
                    # The peer is connecting to us and its attempt wins; give it
                    # time, then try again in case it never arrives.
                    peer.state = PeerState.AWAITING
                    self._run_in_loop(lambda: self._call_later(self._retry_after_tie, lambda: self._retry(rank)))
            return
        self._peer_failed(
            rank, TransportError(f"cannot reach rank {rank}: " + "; ".join(errors or ["no endpoint known"]), "ERR_UNREACHABLE")
        )

    def _retry(self, rank: int) -> None:
        with self._lock:
            peer = self._peers[rank]
            if peer.state is PeerState.AWAITING:
                peer.state = PeerState.CONNECTING
                self._pool.submit(self._connect, rank)

    def _on_acceptable(self, _mask: int) -> None:
        try:
            sock, _addr = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            print(f"fmpi: rank {self.rank}: accept failed: {exc}", file=sys.stderr)
            return
        self._pool.submit(self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        sock.settimeout(self._connect_timeout)
        src = -1
        try:
            src, nonce = read_hello(sock, self.rank)
            with self._lock:
                if not 0 <= src < self.size or src == self.rank:
                    raise HandshakeError(f"connection claims impossible rank {src}")
                peer = self._peer(src)
                if peer.state in (PeerState.NONE, PeerState.AWAITING) or (
                    peer.state is PeerState.CONNECTING and src < self.rank
                ):
                    verdict = Verdict.ACCEPT
                    peer.state = PeerState.ACCEPTING
                elif peer.state is PeerState.CONNECTING:
                    verdict = Verdict.TIE_LOST
                else:
                    verdict = Verdict.DUPLICATE
            accept_side(sock, self._secret, self.rank, src, nonce, verdict)
        except (OSError, HandshakeError) as exc:
            sock.close()
            with self._lock:
                peer = self._peers.get(src)
                if peer is not None and peer.state is PeerState.ACCEPTING:
                    peer.state = PeerState.NONE
                    if peer.backlog:
                        self._ensure_link(peer)
            if not isinstance(exc, HandshakeError) or "impossible" not in str(exc):
                print(f"fmpi: rank {self.rank}: refused a connection: {exc}", file=sys.stderr)
            return
        if verdict is Verdict.ACCEPT:
            self._install(src, sock)
        else:
            sock.close()

    def _install(self, rank: int, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = Link(rank, sock, self)
        with self._lock:
            peer = self._peers[rank]
            peer.link = link
            peer.state = PeerState.LINKED
            backlog, peer.backlog = peer.backlog, []
            # Flush under the lock so no newer send can overtake the backlog.
            for context, tag, parts, nbytes, op in backlog:
                if link.send_data(context, self.rank, tag, parts, nbytes, op, op.sync) and not op.sync:
                    self._complete_locked(op)
        self._run_in_loop(lambda: self._register_link(link))

    def _register_link(self, link: Link) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.has_queued() else 0)
        self._sel.register(link.sock, events, lambda mask: self._on_link_event(link, mask))

    # ============================================================ progress loop
    def _run(self) -> None:
        while not self._stopping:
            timeout = None
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - time.monotonic())
            for key, mask in self._sel.select(timeout):
                try:
                    key.data(mask)
                except Exception as exc:  # never let one bad event kill progress
                    print(f"fmpi: rank {self.rank}: progress error: {exc!r}", file=sys.stderr)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, fn = heapq.heappop(self._timers)
                fn()
        self._shutdown_loop()

    def _on_wake(self, _mask: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._todo_lock:
            todo, self._todo = self._todo, []
        for fn in todo:
            fn()

    def _run_in_loop(self, fn: Callable[[], None]) -> None:
        """Selector changes happen only on the progress thread; others queue them here.

        Callable with or without ``_lock`` held: the queue has its own lock.
        """
        with self._todo_lock:
            self._todo.append(fn)
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full, so a wake-up is pending anyway

    def _call_later(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), fn))

    def _want_write(self, link: Link) -> None:
        try:
            self._sel.modify(link.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, self._sel.get_key(link.sock).data)
        except (KeyError, ValueError):
            pass  # not registered yet (its registration checks the queue) or already gone

    def _on_link_event(self, link: Link, mask: int) -> None:
        try:
            if mask & selectors.EVENT_WRITE:
                sent, empty = link.flush()
                if empty:
                    self._sel.modify(link.sock, selectors.EVENT_READ, self._sel.get_key(link.sock).data)
                if sent or empty:
                    with self._lock:
                        for op in sent:
                            self._complete_locked(op)
                        self._cond.notify_all()  # close() waits for queues to drain
            if mask & selectors.EVENT_READ:
                link.on_readable()
        except PeerClosed:
            self._link_closed(link, None)
        except (OSError, FrameError) as exc:
            self._link_closed(link, exc)

    def _link_closed(self, link: Link, exc: BaseException | None) -> None:
        self._safe_unregister(link.sock)
        link.sock.close()
        if exc is None and link.heard_bye:
            reason = TransportError(f"rank {link.peer} has finalized; it sends nothing more", "ERR_PEER_FINALIZED")
        elif exc is None:
            reason = TransportError(f"rank {link.peer} closed its connection unexpectedly (did it exit or crash?)", "ERR_PEER_DIED")
        else:
            reason = TransportError(f"link to rank {link.peer} failed: {exc}", "ERR_PEER_DIED")
        self._peer_failed(link.peer, reason, link)

    def _peer_failed(self, rank: int, reason: TransportError, link: Link | None = None) -> None:
        failed: list[Op] = link.abandon() if link is not None else []
        with self._lock:
            peer = self._peers[rank]
            peer.state = PeerState.GONE
            peer.error = reason
            peer.link = None
            failed += [op for *_, op in peer.backlog]
            peer.backlog = []
            failed += self._matcher.take_posted_where(lambda r: r.source == rank)
            inflight = self._inflight.pop(rank, None)
            if inflight is not None and inflight[0] is not None:
                failed.append(inflight[0])
            for op in failed:
                if not op.done:
                    op.error = reason
                    self._complete_locked(op)
            self._cond.notify_all()

    def _safe_unregister(self, sock: socket.socket) -> None:
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _stop_loop(self) -> None:
        if self._stopping:
            return
        self._run_in_loop(self._set_stopping)
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _set_stopping(self) -> None:
        self._stopping = True

    def _shutdown_loop(self) -> None:
        for key in list(self._sel.get_map().values()):
            if isinstance(key.fileobj, socket.socket) and key.fileobj not in self._watched:
                key.fileobj.close()
        self._sel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
