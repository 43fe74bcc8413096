"""Where a job lives in Redis: its key names (one hash tag per job) and how long they may outlive it.

Every key of job J is ``fmpi:{J}:...``: the hash tag puts them all in one
Redis Cluster slot, so one Lua script may touch any of them. A published
service name (MPI name publishing, ``redis_names.py``) is a key of its own,
``fmpi:name:NAME``, outside every job (jobs share names); the job that
published it lists it in ``fmpi:{J}:names``, and takes it away when it ends.
"""

from __future__ import annotations

DEFAULT_TTL = 24 * 3600  # seconds a job's keys may outlive a launcher that vanished


def keys(job: str) -> dict[str, str]:
    base = f"fmpi:{{{job}}}"
    return {
        "meta": f"{base}:meta", "members": f"{base}:members", "events": f"{base}:events", "inbox": f"{base}:inbox:",
        "mbox": f"{base}:mbox:", "finished": f"{base}:finished",
        "names": f"{base}:names",
    }


def job_pattern(job: str) -> str:
    """The SCAN pattern of every key of `job`."""
    return f"fmpi:{{{job}}}:*"



def name_key(name: str) -> str:
    """The key of the published service `name`: ``{"port", "job"}`` as JSON."""
    return f"fmpi:name:{name}"
