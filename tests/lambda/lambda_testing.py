"""Helpers shared by the Lambda tests (the fixtures are in conftest.py): paths, fault injection, fmpirun's environment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests_support import Run  # noqa: F401 - re-exported for the Lambda tests
from fmpi.lambda_local.executor import FunctionSpec, Placement, event_of

HERE = Path(__file__).resolve().parent
_lock = threading.Lock()  # (the emulator calls the fault hooks from its request threads)
REPO = HERE.parents[1]
PROGRAMS = HERE / "programs"
FMPIRUN = str(Path(sys.executable).parent / "fmpirun")


@dataclass
class Faults:
    """What the emulated platform does wrong, per rank of the job's events."""

    drop: set[int] = field(default_factory=set)  # accepted (202) but never started
    duplicate: set[int] = field(default_factory=set)  # delivered twice
    netns: Callable[[int], str | None] | None = None  # run a rank (or the ping: "rank" -1) in this network namespace
    delay: dict[int, float] = field(default_factory=dict)  # rank -> seconds its Event invocation waits to start
    throttle: dict[int, int] = field(default_factory=dict)  # rank -> how many of its Invoke calls get a 429
    throttled: list[int] = field(default_factory=list)  # the ranks of the Invoke calls that got one, in order

    def clear(self) -> None:
        self.drop.clear()
        self.duplicate.clear()
        self.delay.clear()
        self.throttle.clear()
        self.throttled.clear()
        self.netns = None

    def start_delay(self, payload: bytes) -> float:
        return self.delay.get(event_of(payload).get("rank"), 0.0)

    def place(self, spec: FunctionSpec, payload: bytes) -> Placement:
        event = event_of(payload)
        rank = -1 if event.get("ping") else event.get("rank")
        if rank in self.drop:
            return Placement(run=False)
        return Placement(netns=self.netns(rank) if self.netns and isinstance(rank, int) else None)

    def throttles(self, payload: bytes) -> bool:
        rank = event_of(payload).get("rank")
        with _lock:
            if self.throttle.get(rank, 0) <= 0:
                return False
            self.throttle[rank] -= 1
            self.throttled.append(rank)
            return True

    def deliveries(self, payload: bytes) -> int:
        return 2 if event_of(payload).get("rank") in self.duplicate else 1


def aws_env(endpoint_url: str | None, cache_dir: Path, **overrides: str) -> dict[str, str]:
    """The environment of an fmpirun that talks to the emulator, and to nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",  # never ask 169.254.169.254 for credentials
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        FMPI_CACHE_DIR=str(cache_dir),
    )
    if endpoint_url:
        env["AWS_ENDPOINT_URL"] = endpoint_url
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


KMEANS = [str(REPO / "apps" / "kmeans.py"), "--points", "100000"]


def kmeans_lasting(seconds: float, n: int = 4) -> list[str]:
    """apps/kmeans.py's arguments for a run of about `seconds` uninterrupted at N = `n` on this machine, timed
    (not guessed): a test of relaunches must outlast several function timeouts whatever the machine's speed."""

    def took(iterations: int) -> float:
        t0 = time.monotonic()
        run = subprocess.run([FMPIRUN, "-n", str(n), "python", *KMEANS, "--iterations", str(iterations)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        return time.monotonic() - t0

    short, long = took(10), took(60)
    per_iteration = max(1e-3, (long - short) / 50)  # (the start-up, in both, cancels out)
    return [*KMEANS, "--iterations", str(max(60, round((seconds - short) / per_iteration)))]
