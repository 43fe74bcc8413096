"""What a rank needs to know to join its job, and its two encodings.

The same ``RankSpec`` reaches a rank as environment variables (local
processes, ranks joined by hand) or as a Lambda event; both are validated
here, so a malformed one fails with one clear message before any I/O.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

ENV_PREFIX = "FMPI_"
DEFAULT_FILL_TIMEOUT = 60.0


class SpecError(ValueError):
    """A rank specification (environment or event) is missing or invalid."""


@dataclass(frozen=True)
class RankSpec:
    job: str
    rank: int  # -1: take any free slot
    size: int
    relay: str
    token: str = field(repr=False)  # the job secret: never printed
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    fill_timeout: float = DEFAULT_FILL_TIMEOUT

    def __post_init__(self) -> None:
        if not self.job:
            raise SpecError("job id is empty")
        if self.size < 1:
            raise SpecError(f"world size must be at least 1, not {self.size}")
        if not -1 <= self.rank < self.size:
            raise SpecError(f"rank {self.rank} is outside a world of {self.size}")
        if not self.relay:
            raise SpecError("no relay URL")
        if len(self.token) < 16:
            raise SpecError("job token is missing or too short")
        if self.fill_timeout <= 0:
            raise SpecError(f"fill timeout must be positive, not {self.fill_timeout}")

    # -- environment --------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        return {ENV_PREFIX + k.upper(): str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "RankSpec | None":
        """The spec fmpirun put in the environment, or None when not launched by fmpirun."""
        if ENV_PREFIX + "JOB" not in env:
            return None
        raw = {k: env.get(ENV_PREFIX + k.upper()) for k in ("job", "rank", "size", "relay", "token", "incarnation", "fill_timeout")}
        return cls.from_mapping(raw, "environment")

    # -- Lambda event -------------------------------------------------------
    def to_event(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "event") -> "RankSpec":
        missing = [k for k in ("job", "rank", "size", "relay", "token") if raw.get(k) in (None, "")]
        if missing:
            raise SpecError(f"rank {where} lacks {', '.join(missing)}")
        try:
            return cls(
                job=str(raw["job"]),
                rank=int(raw["rank"]),
                size=int(raw["size"]),
                relay=str(raw["relay"]),
                token=str(raw["token"]),
                incarnation=str(raw.get("incarnation") or uuid.uuid4().hex),
                fill_timeout=float(raw.get("fill_timeout") or DEFAULT_FILL_TIMEOUT),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"invalid rank {where}: {exc}") from None
