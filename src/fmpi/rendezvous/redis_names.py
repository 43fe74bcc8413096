"""MPI name publishing in Redis: ``RedisNames`` (the ``NameService`` of a redis:// relay).

A published service name is the key ``fmpi:name:NAME`` holding
``{"port", "job"}`` (JSON), shared by every job that uses the same Redis
(``redis_keys.py``). Publishing is ``SET NX`` (set-if-absent: a name
already published is refused); unpublishing is a compare-and-delete script
(``UNPUBLISH_NAME``: only with the port it holds). Each is one key, so it
works on a Redis Cluster as on one server.

Lifetime: the publishing job lists its names in ``fmpi:{J}:names``; when
the job ends, its launcher deletes each name that still belongs to the job
(``drop_job_names``, from ``RedisJob.end``). A launcher that vanished leaves
them to expire with the job's other keys (``DEFAULT_TTL``).

Limits: a name and a port of at most ``MAX_NAME`` / ``MAX_PORT`` characters;
a job publishes at most ``DEFAULT_MAX_PER_JOB`` names (``names_full``).
The server's memory is the user's own Redis, where every key expires.

Unlike the job's keys, a name's port is not sealed: it is what any lookup
reads, and lookups need no job secret (a port's secret guards the Connect,
as with a port passed by hand). Anyone with the Redis URL can read names.
"""

from __future__ import annotations

import json
from typing import Any

from ..wire.errors import RelayError
from ..wire.names import DEFAULT_MAX_PER_JOB, check_name
from .redis_connect import connect, explain
from .redis_keys import DEFAULT_TTL, name_key
from .redis_keys import keys as _keys
from .redis_scripts import DROP_NAME, UNPUBLISH_NAME


class RedisNames:
    """The names of the Redis at `url`, for a process of job `job` (see the module docstring)."""

    def __init__(self, url: str, job: str, ttl: int = DEFAULT_TTL, max_per_job: int = DEFAULT_MAX_PER_JOB) -> None:
        self.url, self._job, self._ttl, self._max = url, job, ttl, max_per_job
        self._keys = _keys(job)

    def publish(self, name: str, port: str) -> None:
        check_name(name, port)
        if not port:
            raise RelayError("a published port name must not be empty", "bad_name")
        with _Client(self.url, self._job) as redis:
            if not redis.exists(self._keys["meta"]):
                raise RelayError(f"no job {self._job!r} in this Redis (it ended, or was never created)", "unknown_job")
            if redis.scard(self._keys["names"]) >= self._max:
                raise RelayError(f"cannot publish {name!r}: a job may publish at most {self._max} names", "names_full")
            record = json.dumps({"port": port, "job": self._job}, separators=(",", ":"))
            if not redis.set(name_key(name), record, nx=True, ex=self._ttl):
                raise RelayError(f"service {name!r} is already published", "name_taken")
            redis.sadd(self._keys["names"], name)
            redis.expire(self._keys["names"], self._ttl)

    def unpublish(self, name: str, port: str) -> None:
        check_name(name, port)
        with _Client(self.url, self._job) as redis:
            owner = _refusing(lambda: redis.register_script(UNPUBLISH_NAME)(keys=[name_key(name)], args=[port]))
            owner = owner.decode() if isinstance(owner, bytes) else str(owner)
            redis.srem(_keys(owner)["names"], name)

    def lookup(self, name: str) -> str:
        check_name(name)
        with _Client(self.url, self._job) as redis:
            held = redis.get(name_key(name))
        if held is None:
            raise RelayError(f"service {name!r} is not published", "name_unknown")
        try:
            port = json.loads(held)["port"]
        except (ValueError, KeyError, TypeError, RecursionError):
            port = None
        if not isinstance(port, str):
            raise RelayError(f"service {name!r} holds no readable port (not written by fmpi)", "name_unknown")
        return port


def drop_job_names(redis: Any, job: str) -> None:
    """`job` ended: delete the names it published (those another job holds now stay)."""
    listed = _keys(job)["names"]
    names = redis.smembers(listed)
    if names:
        drop = redis.register_script(DROP_NAME)
        for name in names:
            drop(keys=[name_key(name.decode() if isinstance(name, bytes) else name)], args=[job])
    redis.delete(listed)


class _Client:
    """A client for one request, closed after it; unreachable Redis is one clear RelayError."""

    def __init__(self, url: str, job: str) -> None:
        self.url, self.job = url, job

    def __enter__(self) -> Any:
        self._redis = connect(self.url, job=self.job)
        return self._redis

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._redis.close()
        if exc is not None and not isinstance(exc, RelayError) and _is_redis_error(exc):
            raise RelayError(f"the name service in Redis failed: {explain(exc)}", "unreachable") from None


def _refusing(call: Any) -> Any:
    """Run a script call; its error replies ('code message') become RelayError with that code."""
    import redis

    try:
        return call()
    except redis.exceptions.ResponseError as exc:
        code, _, message = str(exc).partition(" ")
        if code in ("name_unknown", "name_port"):
            raise RelayError(message, code) from None
        raise


def _is_redis_error(exc: BaseException) -> bool:
    import redis

    return isinstance(exc, redis.exceptions.RedisError)
