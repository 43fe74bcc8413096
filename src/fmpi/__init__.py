"""fmpi: MPI for serverless functions, with the mpi4py API.

``from fmpi import MPI`` (or ``from mpi4py import MPI`` under ``fmpirun``).
"""

from __future__ import annotations

import math
import time
from typing import Callable

__version__ = "0.1.0"

# Set by the platform's host (the Lambda handler) for the length of one invocation: seconds left before it stops us.
_remaining: Callable[[], float] | None = None


def set_remaining_time_source(source: Callable[[], float] | None) -> None:
    """For the code that hosts a rank on a platform with a deadline (the Lambda handler): where
    ``remaining_time()`` reads the seconds left; None when the invocation ends."""
    global _remaining
    _remaining = source


def remaining_time() -> float:
    """Seconds (a float, like ``MPI.Wtime``) until this rank's platform deadline.

    On AWS Lambda: what the invocation's context says is left before the
    function timeout (``get_remaining_time_in_millis``). Elsewhere: the time
    left before ``FMPI_DEADLINE`` (epoch seconds) when that is set, else
    ``math.inf`` (a local process has no platform limit). Never negative.
    """
    source = _remaining
    if source is not None:
        return max(0.0, float(source()))
    from . import settings

    deadline = settings.deadline()
    return math.inf if deadline is None else max(0.0, deadline - time.time())
