"""Transport knobs: which channels links may use, time limits, and the thresholds of the reliable stream.

Everything that decides *when* something happens is here, injectable, so
tests reach every branch quickly (a 0.5 s punch deadline, a 64-byte copy
limit) instead of needing big messages or long waits. Ranks read the
experiment overrides from the environment:

    FMPI_CHANNEL=auto|direct|punch|relay   force how links are made (default auto)
    FMPI_PUNCH_TIMEOUT=S                   hole-punch deadline per link (default 3)
    FMPI_LINK_TIMEOUT=S                    a silent TCP link counts as dead after S (default 5)
    FMPI_RESUME_TIMEOUT=S                  wait for a peer to answer through the relay (default 20)
    FMPI_DIRECT_TIMEOUT=S                  plain connect attempt (default 2)
    FMPI_HEARTBEAT_TIMEOUT=S               the relay counts as gone after S of silence (default 4)
    FMPI_TIMEOUT=S                         a blocking operation fails after S, every rank says what it
                                           waits for (hang diagnosis; default: wait forever)
    FMPI_RELAY_REJOIN=S                    after losing the job's relay, wait this long for it to come back
                                           (a restart) before giving up (default 30; 0: give up at once)
    FMPI_SPIN_US=US                        a blocking wait polls this many microseconds before it sleeps
                                           (0: never; default: spinning.default_spin)
    FMPI_SPIN_YIELD=1                      ... and yields its core between polls (sched_yield): for more
                                           ranks than cores (fmpirun sets it then; default 0)
    FMPI_SHM=0                             no shared-memory lanes between ranks on one host (shm_lane.py;
                                           default: links between such ranks get them)
    FMPI_EAGER_LIMIT=BYTES                 larger messages are announced and move once their receive is
                                           posted (rendezvous; default 1M)
    FMPI_UNEXPECTED_MAX=BYTES              early messages a rank buffers at most, shared among its peers
                                           as credits (default 128M; flow control, stream.py)
    FMPI_DEBUG_LINKS=1                     trace link set-up and failover on stderr
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .. import settings
from .links.shm_lane import DEFAULT_CAPACITY
from .spinning import default_spin

#: auto: plain connect when the peer is reachable as is, else punch, else relay.
#: direct: plain connect only. punch: always punch (even on a LAN), never relay.
#: relay: every link through the relay.
CHANNELS = settings.CHANNELS

_VARIABLE = {"eager_limit": "FMPI_EAGER_LIMIT", "unexpected_max": "FMPI_UNEXPECTED_MAX"}


@dataclass(frozen=True)
class TransportOptions:
    channel: str = "auto"
    connect_timeout: float = 10.0  # one handshake, end to end
    direct_timeout: float = 2.0  # one plain connect() to a peer thought reachable
    punch_timeout: float = 3.0  # one hole punch (both sides start within a relay round trip)
    unsure_punch_timeout: float = 1.0  # ... of a pair whose NAT kinds are not both known, before it relays
    punch_gather: float = 0.002  # link requests arriving this close together are punched in one batch
    link_timeout: float = 5.0  # TCP_USER_TIMEOUT + keepalive on established links
    resume_timeout: float = 20.0  # the peer must answer a RESUME through the relay within this
    retry_after_tie: float = 2.0  # after losing a tie, wait this long for the winner's connection
    copy_limit: int = 256 * 1024  # messages up to this size are copied for resending; larger ones complete on ACK
    ack_delay: float = 0.02  # an ACK waits this long for a frame to ride on
    ack_every: int = 32  # ... unless this many frames ...
    ack_bytes: int = 1 << 20  # ... or bytes are unacknowledged
    ack_window: int = 4 << 20  # copied-but-unacknowledged bytes after which the sender asks for an ACK
    relay_chunk: int = 256 * 1024  # relayed streams travel in FORWARD frames of at most this many bytes
    heartbeat_interval: float = 1.0  # a rank tells the relay it is alive this often
    heartbeat_timeout: float = 4.0  # ... and counts the relay as gone after this long without a word from it
    lost_grace: float = 0.5  # a peer the relay says is lost but whose link is still open gets this long to EOF
    op_timeout: float | None = None  # FMPI_TIMEOUT: blocking operations fail after this (hang.py)
    relay_rejoin: float = 30.0  # the job's relay may be gone this long (restarting) before the rank gives up; 0: never wait
    spin: float = field(default_factory=default_spin)  # FMPI_SPIN_US: poll before sleeping in a wait (spinning.py)
    spin_yield: bool = False  # FMPI_SPIN_YIELD: sched_yield between those polls
    lane_capacity: int = DEFAULT_CAPACITY  # bytes per shared-memory lane direction; 0: no lanes (FMPI_SHM=0)
    eager_limit: int = 1 << 20  # FMPI_EAGER_LIMIT: larger messages go by rendezvous (stream.py)
    unexpected_max: int = 128 << 20  # FMPI_UNEXPECTED_MAX: early eager bytes a rank buffers, over all its peers

    def __post_init__(self) -> None:
        if self.channel not in CHANNELS:
            raise ValueError(f"FMPI_CHANNEL must be one of {', '.join(CHANNELS)}, not {self.channel!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "spin":
                if not value >= 0:
                    raise ValueError(f"FMPI_SPIN_US must be 0 or more microseconds, not {value * 1e6!r}")
            elif f.name in ("lane_capacity", "eager_limit", "unexpected_max"):
                if not value >= 0:
                    raise ValueError(f"{_VARIABLE.get(f.name, f.name)} must be 0 or more bytes, not {value!r}")
            elif f.name == "relay_rejoin":
                if not value >= 0:
                    raise ValueError(f"FMPI_RELAY_REJOIN must be 0 or more seconds, not {value!r}")
            elif f.name not in ("channel", "spin_yield") and value is not None and not value > 0:
                raise ValueError(f"transport option {f.name} must be positive, not {value!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "TransportOptions":
        """Defaults, then the FMPI_* variables that are set (``fmpi.settings``), then `overrides`."""
        s = settings.current() if env is None else settings.read(env)
        values: dict[str, Any] = {
            "channel": s.channel, "punch_timeout": s.punch_timeout, "link_timeout": s.link_timeout,
            "resume_timeout": s.resume_timeout, "direct_timeout": s.direct_timeout,
            "heartbeat_timeout": s.heartbeat_timeout, "op_timeout": s.op_timeout, "relay_rejoin": s.relay_rejoin,
            "spin": default_spin(env) if s.spin is None else s.spin, "spin_yield": s.spin_yield,
            "eager_limit": s.eager_limit, "unexpected_max": s.unexpected_max,
        }
        if not s.shm:
            values["lane_capacity"] = 0
        values.update(overrides)
        return cls(**values)
