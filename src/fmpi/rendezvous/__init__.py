"""The rendezvous of a job: ``connect`` (a rank's side) and ``job_control`` (a launcher's) for any relay URL.

The URL is parsed here, once; the backend it names (fmpi-relay, Redis,
in-process) is chosen here and nowhere else. Backends are imported on first
use, so a rank of an fmpi-relay job never loads the Redis client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .urls import FMPI_RELAY, REDIS, parse

if TYPE_CHECKING:
    from .protocols import JobControl, NameService, Rendezvous


def connect(
    url: str, job: str, token: str, rank: int = -1, sharded: bool = False, incarnation: str = ""
) -> "Rendezvous":
    """The rank side of job `job` at `url` (nothing is connected before ``open``); ValueError for a bad URL.
    `sharded`: the job's rendezvous is spread over the fmpi-relays of `url`, and `rank` (the slot the rank will
    ask for; -1: any, and then its `incarnation` picks the relay it tries first) says which of them it registers at."""
    kind = parse(url).kind
    if kind == FMPI_RELAY:
        from .fmpi_relay import FmpiRelayRendezvous

        return FmpiRelayRendezvous(url, job, token, rank, sharded, incarnation)
    if kind == REDIS:
        from .redis_backend import RedisRendezvous

        return RedisRendezvous(url, job, token)
    from .memory import MemoryRendezvous

    return MemoryRendezvous(url, job, token)


def job_control(url: str, rejoin_within: float = 0.0, sharded: bool = False) -> "JobControl":
    """The launcher side at `url`. `rejoin_within`: seconds a restarted fmpi-relay gets to come back and take a
    running job again (0: a lost relay fails the job; Redis and in-process stores do not restart). `sharded`: the
    job's rendezvous is spread over the fmpi-relays of `url` (``fmpi_shards.py``; a lost one fails the job)."""
    kind = parse(url).kind
    if kind == FMPI_RELAY and sharded and len(parse(url).addresses) > 1:
        from .fmpi_shards import ShardedJobControl

        return ShardedJobControl(url)
    if kind == FMPI_RELAY:
        from .fmpi_relay import FmpiRelayJobControl

        return FmpiRelayJobControl(url, rejoin_within)
    if kind == REDIS:
        from .redis_backend import RedisJobControl

        return RedisJobControl(url)
    from .memory import MemoryJobControl

    return MemoryJobControl(url)


def names(url: str, job: str, token: str) -> "NameService":
    """The name service (MPI ``Publish_name``/``Lookup_name``) of the relay at `url`, for a process of job `job`
    (`token`: its secret). fmpi-relay keeps names at the first relay of the URL, where ports meet too, whatever
    the job's sharding; Redis in keys of its own (``redis_names.py``); memory:// in the store."""
    kind = parse(url).kind
    if kind == FMPI_RELAY:
        from .fmpi_relay import FmpiRelayNames

        return FmpiRelayNames(url, job, token)
    if kind == REDIS:
        from .redis_names import RedisNames

        return RedisNames(url, job)
    from .memory import MemoryNames

    return MemoryNames(url, job, token)


def check(url: str, timeout: float) -> dict[str, Any]:
    """Reach the service at `url` once, as a rank would (RelayError / OSError if not): for fmpi-relay,
    ``{"observed": (ip, port), "probe_port": int | None}``; for Redis and memory:// nothing more to say ({})."""
    kind = parse(url).kind
    if kind == FMPI_RELAY:
        from .relay_connection import RelayConnection, observe

        conn = RelayConnection(url, timeout=timeout)
        try:
            observed, probe_port = observe(conn, timeout)
        finally:
            conn.close()
        return {"observed": observed, "probe_port": probe_port}
    if kind == REDIS:
        from .redis_connect import connect as redis_connect

        redis_connect(url, timeout=timeout).close()  # (connecting pings it)
    return {}
