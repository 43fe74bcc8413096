"""What kind of NAT a rank is behind, decided from what the relay saw of it: the one rule, and its words on the wire.

A rank tells the relay its kind when it registers (REGISTER's ``"nat"``), the
relay passes it to the launcher (``fmpirun -v``), and every rank derives its
peers' kinds from the world table with the same rule (``transport/routes.py``):

* ``none``: the relay saw the address the rank listens on (a public host, or
  a local job): nobody translates;
* ``cone``: translated, and a second connection from the same port to the
  relay's probe port was seen at the same public address and port
  (endpoint-independent mapping: the address the relay saw works for peers);
* ``symmetric``: that second connection got another public port (a new
  mapping per destination: the address the relay saw is useless to peers);
* ``unknown``: translated, and the probe did not answer (a firewall filters
  the probe port, or the relay has none): it may be either.
"""

from __future__ import annotations

from typing import Iterable

NONE, CONE, SYMMETRIC, UNKNOWN = "none", "cone", "symmetric", "unknown"
NAT_KINDS = (NONE, CONE, SYMMETRIC, UNKNOWN)

Endpoint = tuple[str, int]


def nat_kind(private: Iterable[Endpoint], observed: Endpoint, probe: Endpoint | None) -> str:
    """The kind of NAT in front of a rank that listens on `private`, seen at `observed` and by the probe at `probe`."""
    if tuple(observed) in {tuple(e) for e in private}:
        return NONE
    if probe is None:
        return UNKNOWN
    return SYMMETRIC if tuple(probe) != tuple(observed) else CONE


def describe(kind: str) -> str:
    """The kind in words (for fmpirun -v)."""
    return {NONE: "not behind a NAT", UNKNOWN: "NAT kind unknown"}.get(kind, f"behind a {kind} NAT")
