"""Several ranks per function (``fmpirun --ranks-per-function K``): the invocation's other ranks, as processes.

A function has up to 6 vCPUs but one capped network; one rank per function
wastes the cores and multiplies the links. So one invocation runs K ranks:
its own rank in the handler's process (as always), and K-1 *siblings*, each a
process of its own (``python -m fmpi.lambda_runtime.siblings``), because one
Python process runs one thread of Python at a time. A sibling is a whole rank:
it runs the same handler on an event of its own (``RankEvent.for_sibling``),
so it joins at the relay, links to its peers (to the ranks of its function
over loopback TCP: Lambda has no /dev/shm), forwards its output and reports
its exit status exactly as a rank of its own invocation would.

The head (the invocation's own rank) owns them, and none may outlive it:

* a sibling reads its boot record from its standard input and keeps that
  pipe: end of file means the head's process is gone (it aborted, or the
  runtime died), and the sibling ends at once; on Linux it also asks the
  kernel (PR_SET_PDEATHSIG) to kill it when its parent goes;
* a sibling that ends with a failure status (killed, ``os._exit``, an
  interpreter crash: its rank could not say so itself) makes the head abort
  the job with a message naming that rank;
* before the handler returns, the head waits for its siblings until the
  function's deadline and kills what is left, so the next invocation of a warm
  sandbox starts with no process of this one.

Every rank of the invocation gets FMPI_NODE (the head's incarnation): what
``Split_type(COMM_TYPE_SHARED)`` and the hierarchical collectives group by.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

MODULE = "fmpi.lambda_runtime.siblings"
NODE_VARIABLE = "FMPI_NODE"
# A sibling whose head went away exits with this status (128 + SIGKILL, as if the kernel had killed it).
ORPHANED_EXIT = 137
# Seconds a failed sibling's report waits: an abort of the job ends the head too, and that one says why.
CRASH_GRACE = 1.0
PR_SET_PDEATHSIG = 1


class Siblings:
    """The head's side: start the K-1 sibling processes, watch them, and reap them before the invocation ends."""

    def __init__(self, request: Any, context: Any, abort: Callable[[str], None], bundle_root: Any) -> None:
        self.request = request
        self.bundle_root = str(bundle_root)  # (the sibling runs the program from the head's bundle)
        self.context = context
        self.abort = abort  # abort(reason): tell the relay (the head's session; a no-op before it joined)
        self.procs: dict[int, subprocess.Popen] = {}
        self.status: dict[int, int] = {}
        self._ending = threading.Event()

    def start(self) -> Siblings:
        deadline = time.time() + (self.context.get_remaining_time_in_millis() / 1000.0 if self.context else 900.0)
        argv = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", MODULE]
        # The handler's own path (the task root, the runtime's packages): the sibling imports the same fmpi.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        for rank in self.request.local_ranks[1:]:
            boot = {"event": self.request.for_sibling(rank).to_event(), "deadline": deadline, "parent": os.getpid(),
                    "bundle_root": self.bundle_root,
                    "request_id": getattr(self.context, "aws_request_id", None),
                    "log_stream": getattr(self.context, "log_stream_name", None)}
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, close_fds=True)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(boot).encode() + b"\n")
            proc.stdin.flush()  # (and kept open: its end of file tells the sibling that the head is gone)
            self.procs[rank] = proc
            threading.Thread(target=self._watch, args=(rank, proc), name=f"fmpi-sibling-{rank}", daemon=True).start()
        return self

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        code = proc.wait()
        self.status[rank] = code
        if code == 0 or self._ending.wait(CRASH_GRACE):
            return
        how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        ranks = self.request.local_ranks
        self.abort(f"rank {rank} (a process of the invocation running ranks {ranks[0]}-{ranks[-1]}) {how} "
                   "before its rank finished (it crashed, or was killed: out of memory?)")

    def end(self, margin: float = 0.5) -> dict[int, int]:
        """Wait for every sibling until shortly before the function's deadline, kill what is left; their statuses."""
        limit = self.context.get_remaining_time_in_millis() / 1000.0 - margin if self.context else 60.0
        until = time.monotonic() + max(0.0, limit)
        try:
            for proc in self.procs.values():
                try:
                    proc.wait(timeout=max(0.0, until - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self._ending.set()
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stdin is not None:
                    proc.stdin.close()
        return {rank: proc.returncode for rank, proc in self.procs.items()}


# ---------------------------------------------------------------- the sibling's side


class SiblingContext:
    """What the handler reads of a Lambda context, for a sibling: its invocation's request id, log stream and deadline."""

    fmpi_sibling = True  # (the handler keeps the head's FMPI_NODE)
    invoked_function_arn = None

    def __init__(self, boot: dict) -> None:
        self.deadline = float(boot["deadline"])
        self.aws_request_id = boot.get("request_id")
        self.log_stream_name = boot.get("log_stream")

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.time()) * 1000))


def _die_with_parent(parent: int, private_stdin: int) -> None:
    """End this process when the head's does: the kernel's death signal (Linux), and end of file on stdin."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # (the head went before the death signal was set)
        os._exit(ORPHANED_EXIT)

    def watch() -> None:
        while os.read(private_stdin, 4096):
            pass
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="fmpi-head-watch", daemon=True).start()


def main() -> int:
    boot = json.loads(sys.stdin.buffer.readline())
    private = os.dup(0)  # the pipe from the head; the program's standard input is empty, as a function's is
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _die_with_parent(int(boot["parent"]), private)
    from pathlib import Path

    from . import handler

    handler.BUNDLE_ROOT = Path(boot["bundle_root"])
    handler.handler(boot["event"], SiblingContext(boot))
    return 0  # the rank's own status went to the relay; 0 says it got that far


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # (not waiting for threads a program may have left behind: the rank has ended)
