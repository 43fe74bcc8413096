"""The progress thread: one ``select`` (epoll) loop over links, the listener, the relay and a wake-up pipe.

It never polls: it sleeps until a socket is ready, a timer is due, or another
thread queues work with ``call_soon`` (which writes one byte to the pipe).
Selector changes happen only on this thread; other threads ask for them
through ``call_soon``.
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import sys
import threading
import time
from typing import Any, Callable


class ProgressLoop:
    def __init__(self, name: str) -> None:
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._todo: list[Callable[[], None]] = []
        self._todo_lock = threading.Lock()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = itertools.count()
        self._stopping = False
        self.stopped = False
        self.on_stop: Callable[[], None] | None = None  # runs on the loop thread as it ends
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ any thread
    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the progress thread (soon, in order). Callable with any lock held."""
        with self._todo_lock:
            if self.stopped:
                return
            self._todo.append(fn)
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full: a wake-up is pending anyway

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        if self.in_loop():
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), fn))
        else:
            self.call_soon(lambda: self.call_later(delay, fn))

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopping or self.stopped:
            return
        self.call_soon(self._set_stopping)
        if not self.in_loop():
            self._thread.join(timeout)

    # --------------------------------------------------------- loop thread only
    def register(self, fileobj: Any, events: int, callback: Callable[[int], None]) -> None:
        self._sel.register(fileobj, events, callback)

    def set_events(self, fileobj: Any, events: int) -> None:
        try:
            key = self._sel.get_key(fileobj)
            if key.events != events:
                self._sel.modify(fileobj, events, key.data)
        except (KeyError, ValueError):
            pass  # not registered (yet, or any more)

    def unregister(self, fileobj: Any) -> None:
        try:
            self._sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = None
                if self._timers:
                    timeout = max(0.0, self._timers[0][0] - time.monotonic())
                for key, mask in self._sel.select(timeout):
                    try:
                        key.data(mask)
                    except Exception as exc:  # never let one bad event kill progress
                        print(f"fmpi: progress error: {exc!r}", file=sys.stderr)
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, _, fn = heapq.heappop(self._timers)
                    try:
                        fn()
                    except Exception as exc:
                        print(f"fmpi: progress error in a timer: {exc!r}", file=sys.stderr)
        finally:
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception as exc:
                    print(f"fmpi: progress error while stopping: {exc!r}", file=sys.stderr)
            with self._todo_lock:
                self.stopped = True
                self._todo.clear()
            self._sel.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _on_wake(self, _mask: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._todo_lock:
            todo, self._todo = self._todo, []
        for fn in todo:
            try:
                fn()
            except Exception as exc:
                print(f"fmpi: progress error in queued work: {exc!r}", file=sys.stderr)

    def _set_stopping(self) -> None:
        self._stopping = True

    def registered(self) -> list[Any]:
        return [key.fileobj for key in self._sel.get_map().values() if key.fileobj is not self._wake_r]
