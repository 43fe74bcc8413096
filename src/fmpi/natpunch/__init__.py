"""NAT traversal for fmpi ranks: TCP simultaneous open (hole punching).

The primitive lives in :mod:`fmpi.natpunch.simultaneous_open`
(``bind_reusable``, ``make_listener``, ``punch``, ``punch_many``, ``PunchResult``).
"""
