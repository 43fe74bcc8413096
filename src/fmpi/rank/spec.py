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

from ..rendezvous.urls import parse
from ..transport.options import CHANNELS

ENV_PREFIX = "FMPI_"
DEFAULT_FILL_TIMEOUT = 60.0


class SpecError(ValueError):
    """A rank specification (environment or event) is missing or invalid."""


def check_relay_url(url: str) -> None:
    """Raise ValueError unless `url` names a relay: tcp://host:port (fmpi-relay), several of them
    (tcp://a:7000,b:7000: the job's rendezvous on the first, its shared objects sharded over all),
    redis[s]://[:password@]host:port/db, or memory://NAME (in-process, tests); see rendezvous/urls.py."""
    parse(url)


def slot_in_environment(env: Mapping[str, str] = os.environ) -> str:
    """The rank slot fmpirun gave this process, for messages written before the spec could be read ("?")."""
    return env.get(ENV_PREFIX + "RANK", "?")


def token_in_environment(env: Mapping[str, str] = os.environ) -> str | None:
    """The job token a rank joined by hand takes from FMPI_TOKEN (fmpirun --join)."""
    return env.get(ENV_PREFIX + "TOKEN") or None


@dataclass(frozen=True)
class RankSpec:
    job: str
    rank: int  # -1: take any free slot
    size: int
    relay: str
    token: str = field(repr=False)  # the job secret: never printed
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    fill_timeout: float = DEFAULT_FILL_TIMEOUT
    channel: str = ""  # FMPI_CHANNEL for the rank ("" = the rank's own environment, else auto)
    # How long to wait for a relay that went away (FMPI_RELAY_REJOIN); None: the rank's own setting.
    # fmpirun says 0 when the relay runs inside it: a relay that dies with its launcher never comes back.
    rejoin: float | None = None
    # A job made by Comm.Spawn: its first `parents` slots are the spawning processes, the rest the new ones.
    parents: int = 0
    # The job's rendezvous is spread over the fmpi-relays of `relay` (rank r registers at relay r mod k).
    sharded: bool = False

    def __post_init__(self) -> None:
        if not self.job:
            raise SpecError("job id is empty")
        if self.size < 1:
            raise SpecError(f"world size must be at least 1, not {self.size}")
        if not -1 <= self.rank < self.size:
            raise SpecError(f"rank {self.rank} is outside a world of {self.size}")
        if not self.relay:
            raise SpecError("no relay URL")
        try:
            check_relay_url(self.relay)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        if self.channel and self.channel not in CHANNELS:
            raise SpecError(f"channel must be one of {', '.join(CHANNELS)}, not {self.channel!r}")
        if len(self.token) < 16:
            raise SpecError("job token is missing or too short")
        if self.fill_timeout <= 0:
            raise SpecError(f"fill timeout must be positive, not {self.fill_timeout}")
        if self.rejoin is not None and not self.rejoin >= 0:
            raise SpecError(f"rejoin time must be 0 or more seconds, not {self.rejoin}")
        if not 0 <= self.parents < self.size:
            raise SpecError(f"a spawned job of {self.size} slots cannot have {self.parents} parents")
        if self.sharded and len(parse(self.relay).addresses) < 2:
            raise SpecError(f"a sharded rendezvous needs several fmpi-relays in the relay URL, not {self.relay!r}")

    # -- environment --------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        # An empty channel is left out: it must not mask FMPI_CHANNEL set by the user.
        return {ENV_PREFIX + k.upper(): str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()
                if v != "" and v is not None and v is not False}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "RankSpec | None":
        """The spec fmpirun put in the environment, or None when not launched by fmpirun."""
        if ENV_PREFIX + "JOB" not in env:
            return None
        raw = {k: env.get(ENV_PREFIX + k.upper()) for k in ("job", "rank", "size", "relay", "token", "incarnation", "fill_timeout", "channel", "rejoin", "parents", "sharded")}
        return cls.from_mapping(raw, "environment")

    # -- Lambda event -------------------------------------------------------
    def to_event(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}

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
                channel=str(raw.get("channel") or "").strip().lower(),
                rejoin=None if raw.get("rejoin") in (None, "") else float(raw["rejoin"]),
                parents=int(raw.get("parents") or 0),
                sharded=str(raw.get("sharded") or "").strip().lower() in ("1", "true"),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"invalid rank {where}: {exc}") from None
