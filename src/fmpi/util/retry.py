"""The one retry-until-deadline loop: try again, after a pause, while the failure is one that may pass."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def retry_until(
    attempt: Callable[[], T],
    deadline: float,
    interval: float,
    retryable: Callable[[Exception], bool],
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """`attempt()`'s result; a failure `retryable` accepts is tried again `interval` s later while
    ``time.monotonic()`` is before `deadline` (monotonic seconds). Any other failure, or the last one
    once the deadline has passed, is raised as it is.

    `sleep`: how to pause (an ``Event.wait`` ends the pauses early when the caller stops).
    """
    while True:
        try:
            return attempt()
        except Exception as exc:
            if not retryable(exc):
                raise
            pause = min(interval, deadline - time.monotonic())
            if pause <= 0:
                raise
        sleep(pause)
