"""Flow control of one pair: how much of its early messages a receiver may have to hold.

A message that arrives before its receive is posted is *unexpected*: the
receiver must keep it somewhere until a receive asks for it. Left
unbounded, a sender that runs ahead (a thousand ``Isend`` calls of 8 MiB to
a rank that computes) fills the receiver's memory, which on a Lambda
function is an out-of-memory kill. So, as MPI libraries do:

* *eager*: a message of at most ``eager_limit`` bytes (FMPI_EAGER_LIMIT) is
  sent at once, as long as the peer's *credit* allows it;
* *rendezvous*: a larger one, or one past the credit, is only announced
  (an RTS frame with its envelope and size). The receiver matches the
  announcement like any message (probes see it with its size), and when a
  receive matches it, answers CTS; only then does the payload move (a DATA
  frame flagged RNDV), straight into the receive's buffer, or into one made
  then for a receive without one (``recv``);
* *credit*: each sender counts what its eager messages may cost the
  receiver (payload plus ``MESSAGE_COST``); the receiver gives it back
  (a cumulative CREDIT frame) as receives take them, a quarter of the
  credit at a time. Each peer's credit is FMPI_UNEXPECTED_MAX divided among
  the rank's peers, so what a rank holds of early messages stays below
  FMPI_UNEXPECTED_MAX whatever the number of messages or senders.

The announcement takes its place in the pair's numbered stream, so MPI's
order (non-overtaking) holds across eager and rendezvous messages, and
RTS, CTS, CREDIT and the payload are resent after a failover like any
frame. Nothing ever waits for credit: past it, a message goes by
rendezvous. The price is MPI's: a blocking send by rendezvous returns once
its receive is posted, so two ranks that both send such a message before
they receive wait for each other (as under MPICH).
"""

from __future__ import annotations

#: What an early message costs its receiver beyond its payload (the queue entry, the buffer's header), in the
#: credit both ends count: a flood of empty messages is bounded too.
MESSAGE_COST = 256


class Credit:
    """One pair's eager/rendezvous decision (send side, under the stream's lock) and the credit it gives
    back (receive side, under the engine's lock)."""

    __slots__ = ("eager_limit", "_credit", "_sent", "_given_back", "_taken", "_told", "_step")

    def __init__(self, eager_limit: int, credit: int) -> None:
        self.eager_limit = eager_limit
        self._credit = credit
        self._sent = 0  # the cost of every eager message sent so far
        self._given_back = 0  # ... of those the peer said it took (its cumulative CREDIT)
        self._taken = 0  # the cost of the peer's eager messages taken by receives here
        self._told = 0  # ... as last told to the peer
        self._step = max(1, credit // 4)

    def eager(self, nbytes: int) -> bool:
        """Send a message of `nbytes` now (counted against the credit), or only announce it (False)."""
        cost = nbytes + MESSAGE_COST
        if nbytes > self.eager_limit or self._sent - self._given_back + cost > self._credit:
            return False
        self._sent += cost
        return True

    def given_back(self, total: int) -> None:
        """The peer's CREDIT: it took our eager messages worth `total` in all."""
        if total > self._given_back:
            self._given_back = total

    def consume(self, cost: int) -> int:
        """A receive took an eager message of the peer's that cost `cost`: the CREDIT to send now (the new
        cumulative total), or 0 while too little was taken to be worth a frame."""
        self._taken += cost
        if self._taken - self._told < self._step:
            return 0
        self._told = self._taken
        return self._taken
