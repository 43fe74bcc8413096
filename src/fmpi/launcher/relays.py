"""What a launcher does with several relays, whatever runs the ranks (the local and the Lambda backends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rendezvous.urls import FMPI_RELAY, parse

if TYPE_CHECKING:
    from ..dso_client.host import DsoHost
    from .job import Job


def host_objects(job: Job, relay_url: str) -> DsoHost | None:
    """With several relays (tcp://a:7000,b:7000) the job is created on the first; the others must host
    its shared objects too (server-side collectives shard them over all): a ``DsoHost`` for as long as
    the job runs (``end()`` it with the job), or None with one relay (or Redis)."""
    url = parse(relay_url)
    if url.kind != FMPI_RELAY or len(url.addresses) < 2 or getattr(job, "sharded", False):
        return None  # (a sharded job is created on every relay: each hosts its shared objects already)
    from ..dso_client.host import DsoHost
    from .job import log

    first = "tcp://{}:{}".format(*url.first)
    return DsoHost(relay_url, job.id, job.token, skip=[first], on_event=log)
