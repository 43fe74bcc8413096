"""Small helpers shared by test modules (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

BIN = Path(sys.executable).parent


def fmpirun_argv(*args: str) -> list[str]:
    return [str(BIN / "fmpirun"), *args]


def pids_alive(pids: Iterable[int]) -> list[int]:
    """The pids that still exist as running (non-zombie) processes."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_for_file(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)
