"""The relay's name table: MPI name publishing (``Publish_name``/``Lookup_name``/``Unpublish_name``) for its jobs.

A mixin of ``RelayServer``. A name request (NAME_PUBLISH, NAME_UNPUBLISH,
NAME_LOOKUP) is the first request of a connection of its own; it names a live
job of this relay and its token (only a process of a job here may publish or
look up: a stranger who reaches the port reads nothing). The answer is one
NAME_DONE (a lookup's with the port) or an ERROR with the table's code
(``wire/names.py``), and the connection is closed.

A name belongs to the job whose process published it: when the job ends
(``_end_job``), its names go. The table is bounded (``max_names`` in all,
``max_names_per_job``): a full table refuses with ``names_full``. The names
live in this process's memory: a restarted relay has none.
"""

from __future__ import annotations

import logging
from typing import Any

from ..wire.errors import RelayError
from ..wire.names import NameTable
from ..wire.relay_protocol import Kind
from .records import Connection, Job, Refused, live_job

log = logging.getLogger("fmpi.relay")


class NameServing:
    """Answers a connection's name request from ``self.names`` (see the module docstring)."""

    jobs: dict[str, Job]
    names: NameTable

    def _serve_name(self, conn: Connection, kind: Kind, body: dict[str, Any]) -> None:
        job = live_job(self.jobs, body)
        try:
            if kind is Kind.NAME_PUBLISH:
                self.names.publish(job.id, body["name"], body["port"])
                answer: dict[str, Any] = {"name": body["name"]}
            elif kind is Kind.NAME_UNPUBLISH:
                self.names.unpublish(body["name"], body["port"])
                answer = {"name": body["name"]}
            else:
                answer = {"name": body["name"], "port": self.names.lookup(body["name"])}
        except RelayError as exc:
            if exc.code == "names_full":
                log.warning("job %s: %s", job.id, exc)
            raise Refused(exc.code, str(exc)) from None
        conn.send(Kind.NAME_DONE, answer)

    def _drop_names(self, job: Job) -> None:
        """`job` ended: the names its processes published go with it."""
        dropped = self.names.drop_job(job.id)
        if dropped:
            log.info("job %s: %d published name(s) withdrawn with it", job.id, dropped)
