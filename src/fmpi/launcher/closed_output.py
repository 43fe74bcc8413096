"""When whoever reads fmpirun's output goes away (``fmpirun ... | head``).

fmpirun keeps Python's SIGPIPE setting (ignored): with the default action, a
write to a relay or Redis connection that just died would kill fmpirun on
the spot, without a word and with the job's failure unexplained. So a write
to a closed stdout or stderr raises BrokenPipeError instead, and fmpirun
then stops the job as Ctrl-C would, writing nothing more to that stream.

That stop is a SIGINT fmpirun sends its own main thread. A shell starts a
background job (``fmpirun ... | head -1 &`` in a script) with SIGINT
ignored, and Python then installs no handler: ``arm`` gives such a process
one that takes fmpirun's own stop and still ignores everybody else's Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import BinaryIO, TextIO

_stopping = False  # set just before fmpirun signals itself
#: Called before each write of the ranks' output (progress.py wipes its live status line there).
before_write: Callable[[], None] | None = None


def arm() -> None:
    """(Main thread, at start-up) Make sure fmpirun's own SIGINT stops it even where SIGINT is ignored."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, _own_stop_only)


def _own_stop_only(signum: int, frame: object) -> None:
    if _stopping:
        raise KeyboardInterrupt


def write(sink: BinaryIO | TextIO, data: bytes | str) -> None:
    """Write and flush `data`; if the reader is gone, stop the job (see the module docstring)."""
    if before_write is not None:
        before_write()
    try:
        sink.write(data)  # type: ignore[arg-type]
        sink.flush()
    except BrokenPipeError:
        _reader_gone(sink)


def _reader_gone(sink: BinaryIO | TextIO) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sink.fileno())  # later writes (and the final flush at exit) go nowhere, quietly
    finally:
        os.close(devnull)
    global _stopping
    _stopping = True
    # A real SIGINT to the main thread: it interrupts the wait it is blocked in (interrupt_main would not).
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
