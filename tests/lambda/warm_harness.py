"""Serve several rank events, one after the other, in ONE process: a warm Lambda sandbox.

    python warm_harness.py CODE_DIR SCRIPT ARG...   (one invocation per ARG)

WARM_PER_FUNCTION=K: each job has K ranks, all run by the one invocation (the handler's siblings); each
RESULT line then also says which child processes of this one are still alive (``children``).

Each invocation is a one-rank job at an in-process relay; the handler runs
SCRIPT from CODE_DIR with [ARG] as its arguments. Prints one ``RESULT {json}``
line per invocation (the handler's summary and the program's forwarded output),
then ``AFTER {json}``: what the process looks like once the handler is done.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path


class Context:
    aws_request_id = "req"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:warm"

    def __init__(self, seconds: float) -> None:
        self.deadline = time.time() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.time()) * 1000)


def main() -> None:
    code_dir, script, args = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3:]
    from fmpi.lambda_runtime import handler
    from fmpi.lambda_runtime.event import Program, RankEvent
    from fmpi.launcher.job import Job
    from fmpi.relay_server.server import RelayThread

    root = Path(tempfile.mkdtemp())
    (root / "app").symlink_to(code_dir)
    handler.BUNDLE_ROOT = root  # the task root: <root>/app is the program's directory
    real_out = sys.stdout
    relay = RelayThread("127.0.0.1", 0)
    url = "tcp://{}:{}".format(*relay.address)
    before = {"argv": sys.argv[:], "cwd": os.getcwd(), "path": sys.path[:]}
    k = int(os.environ.get("WARM_PER_FUNCTION", "1"))
    fill = 10.0 if k == 1 else 40.0  # (sibling processes import fmpi first: seconds on a loaded machine)
    for arg in args:
        output: list[str] = []
        job = Job(url, k, fill, on_output=lambda rank, stream, data, output=output: output.append(data) if stream == "stdout" else None)
        event = RankEvent(job.spec(0), Program(script=script, args=(arg,)), time.time() + fill, per_function=k).to_event()
        summary = handler.handler(event, Context(30 + fill))
        job.wait(lambda s: len(s.finished) == k, 10)
        job.end()
        print("RESULT", json.dumps({"summary": summary, "output": "".join(output), "children": _children()}),
              file=real_out, flush=True)
    from fmpi.api import runtime

    after = {
        "argv_restored": sys.argv == before["argv"],
        "cwd_restored": os.getcwd() == before["cwd"],
        "path_restored": sys.path == before["path"],
        "mpi_facade_cached": "fmpi.MPI" in sys.modules or "mpi4py" in sys.modules,
        "user_modules_cached": sorted(m for m in ("leaky_helper",) if m in sys.modules),
        "initialized": runtime.state.initialized,
        "token_in_environment": any(k.startswith("FMPI_") for k in os.environ),
    }
    print("AFTER", json.dumps(after), file=real_out, flush=True)
    relay.stop()


def _children() -> list[int]:
    """Pids of this process's living children (from /proc: whoever names us as its parent)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if entry.isdigit() and int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(entry))
    return found


if __name__ == "__main__":
    main()
