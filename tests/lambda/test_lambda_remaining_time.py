"""fmpi.remaining_time() on (emulated) Lambda: the rank sees its function timeout running out, and can act on it."""

from __future__ import annotations

import math
import re
import textwrap

PROGRAM = """
import time
import fmpi
from mpi4py import MPI

comm = MPI.COMM_WORLD
left = fmpi.remaining_time()
print(f"rank {comm.rank} remaining {left:.3f}", flush=True)
# A program that checkpoints and stops in time instead of being cut off by the platform:
while fmpi.remaining_time() > 2.5:
    time.sleep(0.1)
comm.barrier()
print(f"rank {comm.rank} stopped with {fmpi.remaining_time():.3f} s left", flush=True)
"""


def test_ranks_know_their_remaining_time_and_can_stop_before_the_limit(lambda_run, tmp_path):
    prog = tmp_path / "remaining.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    run = lambda_run(2, prog, extra=("--timeout", "8", "--fill-timeout", "6"))
    assert run.returncode == 0, run.stderr
    seen = {int(r): float(t) for r, t in re.findall(r"rank (\d) remaining ([\d.]+)", run.stdout)}
    assert sorted(seen) == [0, 1], run.stdout
    assert all(0 < t <= 8 for t in seen.values()), seen
    stopped = [float(t) for t in re.findall(r"stopped with ([\d.]+) s left", run.stdout)]
    assert len(stopped) == 2 and all(0 < t <= 2.5 for t in stopped), run.stdout


def test_remaining_time_is_reset_after_the_invocation():
    import fmpi
    from fmpi.lambda_runtime.handler import _RemainingTime

    class Context:
        def get_remaining_time_in_millis(self):
            return 4200

    with _RemainingTime(Context()):
        assert fmpi.remaining_time() == 4.2
    assert fmpi.remaining_time() == math.inf  # (from nothing: no deadline)
