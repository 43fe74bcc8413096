"""The relay's refusals and aborts as exceptions: what an ERROR frame or an ABORT notice means to a client.

Every client of a rendezvous (fmpi-relay, Redis, in-process) raises these,
with the same ``code`` for the same refusal, so callers above (the rank
bootstrap, the launcher, the MPI runtime) catch one kind of error.
"""

from __future__ import annotations

from typing import Any

from .relay_protocol import abort_cause


class RelayError(Exception):
    """The relay refused a request, failed the job, or cannot be reached."""

    def __init__(self, message: str, code: str = "error", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or {}


class Aborted(RelayError):
    """The job was aborted (by a rank or by the launcher).

    ``cause``: what the aborting rank's failure was a consequence of, if it
    said (``{"lost": R}``, ``{"aborted": True}``; see ``protocol.abort_cause``).
    """

    def __init__(
        self, code: int, reason: str, rank: int | None, cause: dict[str, Any] | None = None, by_relay: bool = False
    ) -> None:
        who = "the relay" if by_relay else "the launcher" if rank is None else f"rank {rank}"
        super().__init__(f"job aborted by {who}: {reason}", "aborted")
        self.exit_code = code
        self.reason = reason
        self.rank = rank
        self.cause = cause
        self.by_relay = by_relay  # the relay itself ended the job (it is shutting down)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "Aborted":
        """From an ABORT frame's (or notice's) body."""
        rank = body.get("rank")
        return cls(int(body.get("code", 1)), str(body.get("reason", "")), rank if isinstance(rank, int) else None,
                   abort_cause(body.get("cause")), body.get("by") == "relay")
