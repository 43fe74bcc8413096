"""NAT traversal for fmpi ranks: TCP simultaneous open (hole punching).

- ``sockets.py``: the shared port (``bind_reusable``, ``make_listener``);
- ``simultaneous_open.py``: how ranks punch, and ``punch_many`` / ``punch``;
- ``puncher.py``: ``Puncher``, the loop that punches many peers at once;
- ``attempts.py``: a punch's state per peer and endpoint, and ``PunchResult``;
- ``cancel.py``: ``PunchCancel``, stopping peers of a running punch.

What Linux does (measured in the namespace NAT lab, kernel 6.x):

* Sockets may share a local ip:port if all set SO_REUSEADDR *and*
  SO_REUSEPORT (SO_REUSEADDR alone: EADDRINUSE next to a listener).  All
  must belong to the same uid.
* connect() to a 4-tuple that a live socket already uses (a pending
  attempt, or an established/accepted connection, even one still waiting
  in a listener's accept queue) fails *immediately* with EADDRNOTAVAIL.  So
  an attempt cannot be re-issued while the previous one to the same
  endpoint is alive: close it first (closing a SYN_SENT socket sends
  nothing and leaves no TIME_WAIT, so the 4-tuple is free at once).  A
  4-tuple in TIME_WAIT, however, is reused by an explicitly bound socket
  (TCP timestamps on), so re-punching a pair after a close works.
* A host with no socket for the SYN answers RST: ECONNREFUSED within one
  RTT.  Normal while a public peer has not started yet, so refused
  attempts are retried after 100-250 ms (jittered).  But an attempt killed
  by RST is gone: two public peers without listeners keep refusing each
  other (they only connect if their attempts overlap within one RTT: 0 of
  6 runs in the lab), hence the listener.  For the same reason a NAT that
  answers unsolicited SYNs with RST instead of dropping them defeats
  punching completely (lab: cone<->cone with a RSTing gateway fails).
* An incoming SYN is matched against a socket in SYN_SENT for the exact
  4-tuple before any listener, so if both sides are punching the result is
  a simultaneous open on the connecting sockets; only if the local side has
  no attempt to that endpoint (yet) does the listener get it.
* ICMP unreachable in SYN_SENT aborts the attempt (ENETUNREACH /
  EHOSTUNREACH), e.g. for a peer's private address routed nowhere; routers
  rate-limit these ICMPs, so later attempts simply go unanswered.
* A SYN dropped silently by a NAT leaves the attempt in SYN_SENT; the kernel
  would retransmit after 1 s, 3 s, 7 s, ...  We re-issue a silent attempt
  ourselves every ``attempt_timeout`` (default 1 s) so SYNs keep flowing at
  a steady pace until the deadline.
"""
