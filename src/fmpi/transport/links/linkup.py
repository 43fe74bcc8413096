"""Bringing up the link to a peer: plain connect, hole punch, or the relay, and the handshakes.

Links are lazy. The first send to a peer loads the pair's plan (``routes``),
from the peer's record, looked up through the relay first if need be
(``directory.py``): for example ``["punch", "relay"]`` for two ranks behind
different NATs. Steps run one after the other until one yields an
authenticated connection; the last resort is the relay, which always works
while both ranks live.

Punch coordination. A TCP hole punch only works when both ends send SYNs at
about the same time. The side that needs the link (a) sends a PUNCH frame to
the peer (b) through the relay and starts punching at once; b starts when the
PUNCH arrives, one relay hop later, or two if b must look a's record up (well
within the 3 s punch deadline; behind NATs that drop unsolicited SYNs the late
side connects about one round trip after it starts). Links stay lazy: nobody punches a peer it was
not asked for. A request punches at once; requests that arrive within
``punch_gather`` of the last batch's start are gathered and punched by one
``punch_many`` call (one selector loop for all of them, no thread per peer),
on the shared local port that the relay observed (gathering every request
would put 2 ms, ten one-way trips in a Lambda region, on each link's set-up).

Handshakes and duplicates. Every connection runs the authenticated
handshake (``handshake.py``): ``initiate`` on the pool for connections we
opened (plain or punched), the acceptor half on the progress thread for what
our listener accepted (``acceptor.py``: a peer's punch or plain connect that
reached our port while we had no attempt of our own towards it; a stranger
holds no thread). The acceptor's verdict, given once the connector proved
itself, keeps at most one connection per pair:

* a second connection while one is linked or being accepted: DUPLICATE;
* crossing connections while this side also has a HELLO out: the lower
  rank's connection wins (the higher rank's gets TIE_LOST) - but only when
  such a competing connection really exists, so the only working path
  (say a symmetric-NAT rank reaching a public rank) is never refused;
* otherwise ACCEPT.

The loser waits ``retry_after_tie`` for the winner's link, then goes on with
its plan. If the pair ends up split (one side linked by TCP, the other
relayed), the relayed side's RESUME makes the other fail over too, so both
always converge on one carrier.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, Protocol

from ...natpunch.simultaneous_open import PunchCancel, PunchResult, punch_many
from ..core import Core
from ..peers import Peer, PeerState
from ..requests import TransportError
from .acceptor import Acceptor
from .directory import Directory
from .handshake import HandshakeError, Verdict, initiate

Endpoint = tuple[str, int]


class LinkEvents(Protocol):
    """What the linker reports to (``carriers.Carriers``): a link is up, the pair goes through the relay,
    the peer cannot be reached. The last two are called with the core's lock held."""

    def install(self, rank: int, sock: socket.socket, channel: str, role: str, lane: str = "") -> None: ...
    def go_relay_locked(self, peer: Peer) -> None: ...
    def fail_peer_locked(self, peer: Peer, reason: TransportError) -> None: ...


class Linker:
    """Sets up the link to each peer that needs one (see the module docstring)."""

    def __init__(
        self,
        core: Core,
        events: LinkEvents,
        via_relay: Callable[[Peer, str], None],
        secret: bytes,
        host_key: bytes,
        directory: Directory,
        local_addr: Endpoint | None,
    ) -> None:
        self._core = core
        self._events = events
        self._acceptor = Acceptor(core, secret, host_key, self._verdict_for, self._install_accepted, self._accept_abandoned)
        self._via_relay = via_relay  # a PUNCH request to the peer through the relay (``Sender.via_relay``)
        self._secret = secret
        self._host_key = host_key  # sent in every handshake: peers with the same key get shared-memory lanes
        self.directory = directory  # the routes to peers, looked up when first needed
        self._local = local_addr
        self._batches: dict[float, dict[int, list[Endpoint]]] = {}  # punch deadline (s) -> peers to punch together
        self._cancels: dict[int, PunchCancel] = {}
        self._last_batch = float("-inf")  # when the last punch batch started (monotonic)
        self._stopped = False

    # ================================================================ plans
    def _begin(self, peer: Peer) -> None:
        peer.state = PeerState.SETUP
        peer.setup_started = time.monotonic()
        peer.steps = []
        peer.planned = False
        peer.errors = []
        peer.tie_wait_until = 0.0
        peer.punch_wanted = False
        peer.lookup = ""

    def _load_plan(self, peer: Peer) -> None:
        if self._unknown(peer, "active"):
            return
        peer.planned = True
        peer.steps = [s for s in self.directory.steps(peer.rank) if s != peer.running]

    def _passive_plan(self, peer: Peer) -> None:
        if not self._unknown(peer, "passive"):
            peer.steps = self.directory.steps(peer.rank, passive=True)

    def _unknown(self, peer: Peer, side: str) -> bool:
        """Without the peer's record, park it (`side` of the set-up) until the lookup is answered (relay-only: no need)."""
        if self.directory.route(peer.rank) is not None or self._core.options.channel == "relay":
            return False
        if side == "active" or not peer.lookup:
            peer.lookup = side  # (a peer only answered so far, and now needed, gets its own plan)
        self.directory.ask(peer.rank)
        return True

    def on_peers(self, body: dict[str, Any]) -> None:
        """The relay answered a LOOKUP (progress thread): the parked peers it tells of go on with their set-up."""
        core = self._core
        with core.lock:
            for rank in self.directory.answer(body):
                peer = core.peers.get(rank)
                if peer is None or not peer.lookup:
                    continue
                side, peer.lookup = peer.lookup, ""
                if peer.state is not PeerState.SETUP:  # (the peer's own connection came first)
                    continue
                if rank in self.directory.missing:
                    peer.errors.append(self.directory.missing[rank])
                self._passive_plan(peer) if side == "passive" else self._load_plan(peer)
                self.advance(peer)

    # ============================================ triggers (engine lock held)
    def need(self, peer: Peer) -> None:
        """There is something to send to `peer` and no link: set one up."""
        if peer.state is PeerState.NONE:
            self._begin(peer)
            self._load_plan(peer)
            self.advance(peer)
        elif peer.state is PeerState.SETUP and not peer.planned:
            self._load_plan(peer)  # so far this side only answered the peer; now it needs the link itself
            self.advance(peer)

    def decide(self, peer: Peer, src: int) -> Verdict:
        """The acceptor's verdict on a HELLO from `src` (see the module docstring)."""
        if peer.state in (PeerState.LINKED, PeerState.RELAYED, PeerState.GONE) or peer.accepting:
            return Verdict.DUPLICATE
        if peer.handshakes_out and src > self._core.rank:
            return Verdict.TIE_LOST
        if peer.state is PeerState.NONE:
            self._begin(peer)
        peer.accepting = True
        return Verdict.ACCEPT

    def cancel_punch(self, rank: int) -> None:
        cancel = self._cancels.pop(rank, None)
        if cancel is not None:
            cancel.cancel(rank)

    def stop(self) -> None:
        self._stopped = True
        for cancel in set(self._cancels.values()):
            cancel.cancel()
        self._cancels.clear()

    def advance(self, peer: Peer) -> None:
        """Start the next step when nothing is in progress any more."""
        if peer.state is not PeerState.SETUP or self._stopped:
            return
        if peer.running or peer.handshakes_out or peer.accepting or peer.lookup:
            return
        now = time.monotonic()
        if peer.tie_wait_until > now:
            rank = peer.rank
            self._core.loop.call_later(peer.tie_wait_until - now + 0.001, lambda: self._recheck(rank))
            return
        if peer.punch_wanted:
            peer.punch_wanted = False
            if "punch" in peer.steps:
                peer.steps.remove("punch")
            if self.directory.usable(peer.rank, ["punch"]):
                peer.steps.insert(0, "punch")
        if not peer.steps and not peer.planned and peer.stream.pending():
            self._load_plan(peer)
        if not peer.steps:
            if peer.planned or peer.stream.pending():
                why = "; ".join(peer.errors) or "no way to reach it"
                self._events.fail_peer_locked(peer, TransportError(f"cannot reach rank {peer.rank}: {why}", "ERR_UNREACHABLE"))
            else:
                peer.state = PeerState.NONE  # we only answered the peer; it will come back if it needs us
            return
        step = peer.steps.pop(0)
        if step == "relay":
            self._events.go_relay_locked(peer)
        elif step == "direct":
            peer.running = "direct"
            endpoints = list(self.directory.plan(peer.rank).direct) or list(self.directory.plan(peer.rank).punch)
            self._core.pool.submit(self._direct, peer.rank, endpoints)
        elif step == "punch":
            self._start_punch(peer)

    def _recheck(self, rank: int) -> None:
        with self._core.lock:
            peer = self._core.peers.get(rank)
            if peer is not None:
                self.advance(peer)

    # ============================================================== direct
    def _direct(self, rank: int, endpoints: list[Endpoint]) -> None:
        core = self._core
        try:
            for endpoint in endpoints:
                with core.lock:
                    if core.peers[rank].state is not PeerState.SETUP:
                        return
                where = f"{endpoint[0]}:{endpoint[1]}"
                try:
                    sock = socket.create_connection(endpoint, timeout=core.options.direct_timeout)
                except OSError as exc:
                    with core.lock:
                        core.peers[rank].errors.append(f"connect {where}: {exc.strerror or exc}")
                    continue
                if self._initiate(rank, sock, "direct", where):
                    return
        finally:
            with core.lock:
                peer = core.peers[rank]
                if peer.running == "direct":
                    peer.running = None
                self.advance(peer)

    # =============================================================== punch
    def on_punch_request(self, rank: int) -> None:
        """The peer asked us (through the relay) to punch towards it now. Progress thread."""
        core = self._core
        if not 0 <= rank < core.size or rank == core.rank:
            return
        with core.lock:
            peer = core.peer(rank)
            if peer.state is PeerState.NONE:
                self._begin(peer)
                self._passive_plan(peer)
                self.advance(peer)
            elif peer.state is PeerState.SETUP and peer.running != "punch":
                peer.punch_wanted = True
                self.advance(peer)

    def _start_punch(self, peer: Peer) -> None:
        core = self._core
        peer.running = "punch"
        if peer.planned:
            # Ask the peer to punch towards us too (it ignores this if it already is).
            self._via_relay(peer, "punch")
        route = self.directory.plan(peer.rank)
        timeout = core.options.punch_timeout
        if route.unsure and core.options.channel == "auto":
            timeout = min(timeout, core.options.unsure_punch_timeout)  # (the relay is next: do not wait long)
        batch = self._batches.setdefault(timeout, {})
        batch[peer.rank] = list(route.punch)
        if len(batch) == 1:  # a lone request punches at once; one that closely follows a batch is gathered
            recent = time.monotonic() - self._last_batch < core.options.punch_gather
            core.loop.call_later(core.options.punch_gather if recent else 0.0, lambda: self._start_batch(timeout))

    def _start_batch(self, timeout: float) -> None:
        core = self._core
        with core.lock:
            batch = self._batches.pop(timeout, {})
            if self._stopped or not batch:
                return
            self._last_batch = time.monotonic()
            cancel = PunchCancel()
            for rank in batch:
                self._cancels[rank] = cancel
        core.pool.submit(self._punch, batch, cancel, timeout)

    def _punch(self, batch: dict[int, list[Endpoint]], cancel: PunchCancel, timeout: float) -> None:
        """One punch_many for the batch; each peer is handed on the moment its outcome is known."""
        core = self._core
        assert self._local is not None
        deadline = time.monotonic() + timeout
        done: set[int] = set()

        def on_result(rank: int, result: PunchResult) -> None:
            done.add(rank)
            if result.ok:
                for extra in result.extra_socks:
                    extra.close()
                core.pool.submit(self._punched, rank, result.sock)
            else:
                self._punch_failed(rank, result.reason)

        try:
            punch_many(self._local, batch, deadline, listen=False, cancel=cancel, on_result=on_result)
        except Exception as exc:  # noqa: BLE001 - e.g. the shared port cannot be bound
            for rank in set(batch) - done:
                self._punch_failed(rank, f"hole punch failed: {exc!r}")
        finally:
            with core.lock:
                for rank in batch:
                    if self._cancels.get(rank) is cancel:
                        del self._cancels[rank]
            cancel.close()

    def _punch_failed(self, rank: int, reason: str) -> None:
        core = self._core
        doomed = self.directory.plan(rank).doomed
        if doomed and core.options.channel == "punch":
            reason = f"FMPI_CHANNEL=punch, but {doomed}: a hole punch cannot work ({reason})"
        with core.lock:
            peer = core.peers[rank]
            if peer.state is PeerState.SETUP:
                peer.errors.append(reason)
            if peer.running == "punch":
                peer.running = None
            self.advance(peer)

    def _punched(self, rank: int, sock: socket.socket) -> None:
        try:
            self._initiate(rank, sock, "punched", "punched connection")
        finally:
            with self._core.lock:
                peer = self._core.peers[rank]
                if peer.running == "punch":
                    peer.running = None
                self.advance(peer)

    # ========================================================== handshakes
    def _initiate(self, rank: int, sock: socket.socket, channel: str, where: str) -> bool:
        """Handshake on a connection we opened. True when the pair is settled (stop trying others)."""
        core = self._core
        with core.lock:
            peer = core.peers[rank]
            if peer.state is not PeerState.SETUP or peer.accepting:
                sock.close()
                return True
            peer.handshakes_out += 1
        swapped = False
        given: Verdict | None = None

        def decide() -> Verdict:
            nonlocal swapped, given
            with core.lock:
                swapped = True
                peer.handshakes_out -= 1
                given = self.decide(peer, rank)
                return given

        try:
            sock.settimeout(core.options.connect_timeout)
            outcome = initiate(sock, self._secret, core.rank, rank, channel, decide, self._host_key)
        except (OSError, HandshakeError) as exc:
            sock.close()
            with core.lock:
                if not swapped:
                    peer.handshakes_out -= 1
                elif given is Verdict.ACCEPT:
                    peer.accepting = False
                peer.errors.append(f"{where}: {exc}")
            return False
        if outcome.verdict is Verdict.ACCEPT:
            self._events.install(rank, sock, outcome.channel, outcome.role, outcome.lane)
            return True
        sock.close()
        with core.lock:
            if outcome.role == "connector":
                peer.handshakes_out -= 1
            if outcome.verdict is Verdict.WRONG_RANK:
                peer.errors.append(f"{where}: reached another rank")
                return False
            if outcome.role == "connector":
                # The peer's own connection wins (or one is already up): give it time to arrive.
                peer.tie_wait_until = time.monotonic() + core.options.retry_after_tie
        return True

    def accepted(self, sock: socket.socket) -> None:
        """Our listener accepted a connection (progress thread): its handshake runs there too (``acceptor.py``)."""
        self._acceptor.add(sock)

    def _verdict_for(self, src: int) -> Verdict:
        """The verdict on a connection that proved to be rank `src` (progress thread)."""
        with self._core.lock:
            return self.decide(self._core.peer(src), src)

    def _install_accepted(self, src: int, sock: socket.socket, channel: str, lane: str) -> None:
        self._events.install(src, sock, channel, "acceptor", lane)

    def _accept_abandoned(self, src: int) -> None:
        """An accepted connection broke before it became the link: the pair is free again."""
        with self._core.lock:
            peer = self._core.peers[src]
            peer.accepting = False
            self.advance(peer)
