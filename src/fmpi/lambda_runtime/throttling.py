"""Starting ranks no faster than Lambda lets a function scale, and retrying the invocations it throttles.

Lambda scales a function by at most 1,000 concurrent executions every 10
seconds (since late 2023; ``FMPI_LAMBDA_SCALING`` sets another rule, for a
rehearsal). ``Pacer`` holds the fan-out to that: invocation *i* of a job is
not made before ``period * (i // step)`` seconds from the first, so a job of
3,000 ranks starts in three waves 10 s apart instead of having two thirds of
its invocations refused.

An invocation Lambda refuses for the moment (``TooManyRequestsException``,
HTTP 429: the account's concurrency, the request rate, or the scaling rule)
is made again after a back-off with full jitter (a random wait up to
``BASE * 2**attempt``, at most ``CAP``), at most ``ATTEMPTS`` times; only
then is the rank reported as not started. This is the only retry layer for
invocations: the client making them has botocore's retries off, so that a
throttle is seen (and shown) rather than waited out silently.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

SCALE_STEP, SCALE_PERIOD = 1000, 10.0  # Lambda: +1,000 concurrent executions per function every 10 s
ATTEMPTS = 12  # invocations of one event, in all, while Lambda throttles it
BASE, CAP = 0.1, 3.0  # seconds: back-off with full jitter between them


class Pacer:
    """Waits so that the `count`-th invocation of a job starts no earlier than Lambda's scaling rule allows."""

    def __init__(self, step: int = SCALE_STEP, period: float = SCALE_PERIOD,
                 on_wait: Callable[[float, int], None] | None = None) -> None:
        self.step, self.period = step, period
        self.on_wait = on_wait  # (seconds, invocations so far): the platform is the bottleneck
        self._lock = threading.Lock()
        self._count = 0
        self._t0: float | None = None

    def acquire(self, ranks: int) -> None:
        """Before invoking an event that stands for `ranks` ranks (one, or a block of the invocation tree)."""
        with self._lock:
            now = time.monotonic()
            if self._t0 is None:
                self._t0 = now
            self._count += ranks
            start_at = self._t0 + self.period * ((self._count - 1) // self.step)
            count = self._count
        wait = start_at - now
        if wait > 0:
            if self.on_wait is not None:
                self.on_wait(wait, count)
            time.sleep(wait)


def is_throttle(exc: BaseException) -> bool:
    response = getattr(exc, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code == "TooManyRequestsException" or status == 429


def invoke_with_backoff(invoke: Callable[[], Any], on_throttled: Callable[[int], None] | None = None,
                        attempts: int = ATTEMPTS) -> Any:
    """``invoke()``, made again after a jittered back-off while Lambda throttles it; raises the last throttle
    (or any other error at once)."""
    attempt = 0
    while True:
        try:
            return invoke()
        except Exception as exc:
            attempt += 1
            if not is_throttle(exc) or attempt >= attempts:
                raise
            if on_throttled is not None:
                on_throttled(attempt)
            time.sleep(random.uniform(0, min(CAP, BASE * 2 ** (attempt - 1))))
