"""Stopping some peers of a running punch, or all of them, from another thread (no polling: a pipe wakes the loop)."""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable


class PunchCancel:
    """Stops peers of a running :func:`punch_many` from another thread.

    The transport punches a batch of peers in one call; when one of them is
    linked some other way meanwhile (the peer's own connection reached our
    listener, or the pair moved to the relay), ``cancel(key)`` closes that
    peer's attempts at once instead of letting them run to the deadline.
    ``cancel()`` without a key stops the whole call.  A pipe wakes the
    punch loop, so cancelling costs no polling.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[Hashable] = set()
        self._all = False
        self._closed = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def cancel(self, key: Hashable | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            if key is None:
                self._all = True
            else:
                self._keys.add(key)
            try:
                os.write(self._w, b"x")
            except BlockingIOError:
                pass  # a wake-up is pending anyway

    def cancelled(self, key: Hashable) -> bool:
        with self._lock:
            return self._all or key in self._keys

    def fileno(self) -> int:
        return self._r

    def _drain(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._r)
            os.close(self._w)
