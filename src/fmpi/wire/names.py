"""MPI name publishing: the limits every name service keeps, and the table fmpi-relay and memory:// hold.

A name service maps a *service name* to a port name (``MPI.Publish_name``,
``Lookup_name``, ``Unpublish_name``; api/names.py). Each name belongs to the
job of the process that published it, and goes away when that job ends, so
stale names do not pile up. Publishing a name that is already published is
refused (set-if-absent); unpublishing needs the port it was published with
(compare-and-delete: a stranger who knows a service's name cannot withdraw it).

The table is bounded: at most ``max_names`` names in all and
``max_per_job`` per job (one job cannot fill it for the others), each name
and port at most ``MAX_NAME`` / ``MAX_PORT`` characters. Refusals are
``RelayError`` with the code every backend uses for them:

    bad_name      an empty, over-long or non-string name or port
    name_taken    Publish: the name is published already
    name_unknown  Lookup / Unpublish: no such name
    name_port     Unpublish: the name is published with another port
    names_full    Publish: the table (or the job's share of it) is full
"""

from __future__ import annotations

from typing import Any

from .errors import RelayError

#: Characters of a service name (MPI has no MAX_SERVICE_NAME; MPI.MAX_PORT_NAME bounds both).
MAX_NAME = 1024
#: Characters of a port name (MPI.MAX_PORT_NAME).
MAX_PORT = 1024
DEFAULT_MAX_NAMES = 10_000
DEFAULT_MAX_PER_JOB = 256


def check_name(name: Any, port: Any = "") -> None:
    """RelayError ``bad_name`` unless `name` (and `port`, if one is given) are fit for a name service."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise RelayError(f"a service name must be a string of 1 to {MAX_NAME} characters", "bad_name")
    if not isinstance(port, str) or len(port) > MAX_PORT:
        raise RelayError(f"a port name must be a string of at most {MAX_PORT} characters", "bad_name")


class NameTable:
    """Service name -> (port, owning job), bounded (see the module docstring). Not thread-safe: its holder locks."""

    def __init__(self, max_names: int = DEFAULT_MAX_NAMES, max_per_job: int = DEFAULT_MAX_PER_JOB) -> None:
        self.max_names, self.max_per_job = max_names, max_per_job
        self._names: dict[str, tuple[str, str]] = {}
        self._by_job: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._names)

    def publish(self, job: str, name: str, port: str) -> None:
        check_name(name, port)
        if not port:
            raise RelayError("a published port name must not be empty", "bad_name")
        if name in self._names:
            raise RelayError(f"service {name!r} is already published", "name_taken")
        mine = self._by_job.setdefault(job, set())
        if len(self._names) >= self.max_names or len(mine) >= self.max_per_job:
            if not mine:
                del self._by_job[job]
            limit = (f"this relay keeps at most {self.max_names} names" if len(self._names) >= self.max_names
                     else f"a job may publish at most {self.max_per_job} names")
            raise RelayError(f"cannot publish {name!r}: the name table is full ({limit})", "names_full")
        self._names[name] = (port, job)
        mine.add(name)

    def unpublish(self, name: str, port: str) -> None:
        check_name(name, port)
        held = self._names.get(name)
        if held is None:
            raise RelayError(f"service {name!r} is not published", "name_unknown")
        if held[0] != port:
            raise RelayError(f"service {name!r} is published with another port", "name_port")
        self._forget(name, held[1])

    def lookup(self, name: str) -> str:
        check_name(name)
        held = self._names.get(name)
        if held is None:
            raise RelayError(f"service {name!r} is not published", "name_unknown")
        return held[0]

    def drop_job(self, job: str) -> int:
        """Forget every name `job` published (it ended); how many there were."""
        names = self._by_job.pop(job, set())
        for name in names:
            self._names.pop(name, None)
        return len(names)

    def _forget(self, name: str, job: str) -> None:
        del self._names[name]
        mine = self._by_job.get(job)
        if mine is not None:
            mine.discard(name)
            if not mine:
                del self._by_job[job]
