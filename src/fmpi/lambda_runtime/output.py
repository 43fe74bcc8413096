"""stdout/stderr of a Lambda rank, forwarded to the launcher through the relay as it is produced.

``ForwardedOutput`` swaps ``sys.stdout``/``sys.stderr`` for text streams
that collect what is written and send it as OUTPUT frames every
``FLUSH_INTERVAL`` (and at once on ``flush()``, or when ``CHUNK`` characters
are waiting), so a chatty program costs one frame per interval, not one per
line; the launcher prints complete lines as the local backend prints a
rank's pipes. Everything is also written to the original streams, so the
function's own logs (CloudWatch) keep the program's output, unless the
launcher said not to (``tee=False``).

Only Python-level writes are forwarded: output that a C extension or a
child process writes straight to file descriptor 1 or 2 reaches CloudWatch
only.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from typing import TextIO

CHUNK = 32 * 1024  # characters per OUTPUT frame (well inside the relay's frame limit)
FLUSH_INTERVAL = 0.05  # seconds: how long output may wait before it is sent

Send = Callable[[str, str], None]  # (stream name, text)


class _BinaryView(io.RawIOBase):
    """``sys.stdout.buffer`` for programs that write bytes."""

    def __init__(self, text: ForwardingStream) -> None:
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class ForwardingStream(io.TextIOBase):
    def __init__(self, name: str, send: Send, tee: TextIO | None) -> None:
        self.name = name
        self._send = send
        self._tee = tee
        self._pending: list[str] = []
        self._pending_len = 0
        self._lock = threading.Lock()
        self.buffer = _BinaryView(self)
        self.chars = 0  # total forwarded

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not s:
            return 0
        if self._tee is not None:
            try:
                self._tee.write(s)
            except (OSError, ValueError):
                pass
        with self._lock:
            self._pending.append(s)
            self._pending_len += len(s)
            if self._pending_len >= CHUNK:
                text = "".join(self._pending)
                self._pending, self._pending_len = [], 0
                self._emit(text)
        return len(s)

    def flush(self) -> None:
        with self._lock:
            text = "".join(self._pending)
            self._pending, self._pending_len = [], 0
            self._emit(text)
        if self._tee is not None:
            try:
                self._tee.flush()
            except (OSError, ValueError):
                pass

    def has_pending(self) -> bool:
        return self._pending_len > 0

    def _emit(self, text: str) -> None:
        # Called with the lock held, so chunks of one stream keep their order.
        for start in range(0, len(text), CHUNK):
            chunk = text[start:start + CHUNK]
            self.chars += len(chunk)
            try:
                self._send(self.name, chunk)
            except Exception:  # noqa: BLE001 - the relay is gone: the tee still has it
                pass


class ForwardedOutput:
    """While active, ``sys.stdout``/``sys.stderr`` forward to `send`; ``close()`` flushes and restores.

    `tee`: also write to the original streams (the function's log). fmpirun
    turns it off with ``--no-log-output``: CloudWatch bills every byte ingested.
    """

    def __init__(self, send: Send, tee: bool = True) -> None:
        self._saved = (sys.stdout, sys.stderr)
        self.stdout = ForwardingStream("stdout", send, sys.stdout if tee else None)
        self.stderr = ForwardingStream("stderr", send, sys.stderr if tee else None)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="fmpi-output", daemon=True)

    def __enter__(self) -> ForwardedOutput:
        sys.stdout, sys.stderr = self.stdout, self.stderr
        self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def flush(self) -> None:
        self.stdout.flush()
        self.stderr.flush()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.flush()
        sys.stdout, sys.stderr = self._saved

    def _tick(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL):
            for stream in (self.stdout, self.stderr):
                if stream.has_pending():
                    stream.flush()
