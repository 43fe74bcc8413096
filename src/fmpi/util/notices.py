"""A message that may repeat many times (a flood of bad connections) printed once, then summarized.

The first occurrence is printed as it is; the ones after it within
``every`` seconds are only counted, and the next occurrence after that
prints one line with the count and the first of them. A flood of 300
refused connections is then two or three lines, not 300. A flood that
simply stops is summarized too: a timer prints what is held once the
period is over (and ``flush`` at once, for an owner that is closing).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO


class RepeatedNotice:
    def __init__(self, prefix: str, every: float = 10.0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self.every = every
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()
        self._last_printed: float | None = None
        self._held = 0
        self._first_held = ""
        self._timer: threading.Timer | None = None

    def say(self, detail: str) -> None:
        with self._lock:
            now = self._clock()
            if self._last_printed is not None and now - self._last_printed < self.every:
                if not self._held:
                    self._first_held = detail
                    self._timer = threading.Timer(self._last_printed + self.every - now, self.flush)
                    self._timer.daemon = True
                    self._timer.start()
                self._held += 1
                return
            if self._held:
                line = f"{self.prefix}: {detail} (and {self._held} more since the last report, the first: {self._first_held})"
            else:
                line = f"{self.prefix}: {detail}"
            self._held, self._last_printed = 0, now
            self._cancel_timer()
        print(line, file=self._stream or sys.stderr, flush=True)

    def flush(self) -> None:
        """Print what is held now, if anything (the period's timer, or an owner about to close)."""
        with self._lock:
            if not self._held:
                return
            line = f"{self.prefix}: {self._held} more like it since the last report, the first: {self._first_held}"
            self._held, self._last_printed = 0, self._clock()
            self._cancel_timer()
        print(line, file=self._stream or sys.stderr, flush=True)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        self._timer = None
