"""Ranks that could not join, heard from the function's log: the job ends at once with their cause.

A rank that cannot reach the relay cannot say so through the relay, and an
``Event`` invocation's return value goes nowhere. What it can do is log: the
handler writes one line with ``fmpi_join_failed``, its rank, the job id and
the error (``handler.JOIN_FAILED``). While the world fills, ``JoinFailures``
asks CloudWatch Logs every couple of seconds for such lines of this job
(``FilterLogEvents`` on ``/aws/lambda/NAME``), and reports the first one,
so fmpirun ends with "rank 3 could not join: cannot reach the relay at ..."
within seconds instead of waiting for the fill timeout.

The identity running fmpirun needs ``logs:FilterLogEvents`` on the log group
(docs/lambda.md); without it the watch stops after one warning, and the fill
timeout names the missing ranks as before.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...lambda_runtime.handler import JOIN_FAILED
from .aws import error_code

POLL_INTERVAL = 2.0  # seconds between FilterLogEvents calls (CloudWatch allows 5 per second per account)
LINE = re.compile(rf"{JOIN_FAILED}: rank (\d+) of job (\S+) could not join: (.*)")


class JoinFailures:
    """A daemon thread that polls the function's log for this job's join failures until ``stop()``."""

    def __init__(self, logs: Any, function: str, job: str, on_failure: Callable[[int, str], None],
                 warn: Callable[[str], None]) -> None:
        self.logs = logs
        self.group = f"/aws/lambda/{function}"
        self.job = job
        self.on_failure = on_failure
        self.warn = warn
        self.since_ms = int(time.time() * 1000) - 5000  # clocks differ a little
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fmpi-join-failures", daemon=True)

    def start(self) -> JoinFailures:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(POLL_INTERVAL):
            try:
                found = self.poll()
            except Exception as exc:  # noqa: BLE001 - the watch is a help: the fill timeout still ends the job
                if error_code(exc) == "ResourceNotFoundException":
                    continue  # no invocation has logged anything yet
                self.warn(f"{explain(exc, f'read {self.group} for ranks that could not join')}; "
                          "a rank that cannot join is reported at the fill timeout")
                return
            if found is not None:
                self.on_failure(*found)
                return

    def poll(self) -> tuple[int, str] | None:
        """The first join failure of this job logged so far: (rank, why), or None."""
        token = None
        while True:
            request = {"logGroupName": self.group, "startTime": self.since_ms,
                       "filterPattern": f"{JOIN_FAILED} {self.job}"}
            if token:
                request["nextToken"] = token
            page = self.logs.filter_log_events(**request)
            for event in page.get("events", []):
                found = parse(event.get("message", ""), self.job)
                if found is not None:
                    return found
            token = page.get("nextToken")
            if not token:
                return None


def parse(message: str, job: str) -> tuple[int, str] | None:
    """(rank, why) from one log line of the handler (powertools JSON, or plain text), if it is `job`'s join failure."""
    text = message
    try:
        record = json.loads(message)
        if isinstance(record, dict):
            text = str(record.get("message", ""))
    except ValueError:
        pass
    m = LINE.search(text)
    if m is None or m.group(2) != job:
        return None
    return int(m.group(1)), m.group(3).strip()
