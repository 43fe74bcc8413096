"""New ranks for ``Comm.Spawn``: a job of their own at the parents' relay, which the parents join too.

A spawn makes a second job at the relay the spawning job uses, of P + C
slots: the P spawning processes take slots 0..P-1 (each joins with a second
rank session, beside the one of its own job), the C new processes slots
P..P+C-1 (their spec says ``parents=P``, so their COMM_WORLD is those C
slots). The intercommunicator between parents and children lives on that
job's transport, so nothing of the parents' own job changes: its size, its
links and its rank numbers stay as they were.

The spawning root creates the job (``JobControl``) and starts the new
processes; here they are local processes, children of the root that inherit
its environment (the mpi4py shim on PYTHONPATH), working directory and
output. The job's events need no handling of their own: an abort or a failure
of the spawned job reaches the parents' second sessions, which end their
processes as any rank of an aborted job ends, so the parents' launcher sees
them go and ends the parents' job in turn; nobody is left waiting.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .. import rendezvous
from ..wire.errors import Aborted, RelayError
from .join import RankSession, join
from .spec import RankSpec

#: Seconds the new processes and the parents have to take their slots.
FILL_TIMEOUT = 60.0
#: Seconds a finalizing root waits for the processes it spawned before ending them.
CHILD_EXIT_GRACE = 30.0


@dataclass(frozen=True)
class SpawnedJob:
    """What every parent needs to join the spawned job (the root sends it to the others)."""

    job: str
    token: str
    relay: str
    parents: int
    children: int

    def spec(self, slot: int) -> RankSpec:
        return RankSpec(self.job, slot, self.parents + self.children, self.relay, self.token,
                        fill_timeout=FILL_TIMEOUT, parents=self.parents)


class Quiet:
    """A spawned (or port's) job's events at its creator: nothing to do (see the module docstring)."""

    def event(self, kind: str, body: dict[str, Any]) -> None:
        pass

    def aborted(self, exc: Aborted) -> None:
        pass

    def failed(self, exc: RelayError) -> None:
        pass

    def resume_state(self) -> dict[str, Any] | None:
        return None


@dataclass
class Children:
    """The processes one spawn started, and the job they run in (held by the spawning root)."""

    control: Any
    processes: list[subprocess.Popen] = field(default_factory=list)

    def wait(self, grace: float = CHILD_EXIT_GRACE) -> None:
        """Wait for the processes to end (killing those still there after `grace` s), then end the job."""
        deadline = time.monotonic() + grace
        for proc in self.processes:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"fmpi: a spawned process (pid {proc.pid}) did not end {grace:g} s after its parents; "
                      "ending it", file=sys.stderr)
                proc.kill()
                proc.wait()
        try:
            self.control.end()
        except (RelayError, OSError):
            pass  # the relay forgets a job whose creator left anyway


def create_job(relay: str, parents: int, children: int) -> tuple[SpawnedJob, Children]:
    """Create a job of `parents` + `children` slots at `relay`; the creator ends it (``Children.wait``)."""
    spawned = SpawnedJob("spawn-" + secrets.token_hex(8), secrets.token_hex(16), relay, parents, children)
    control = rendezvous.job_control(relay)
    control.create(spawned.job, spawned.token, parents + children, FILL_TIMEOUT, Quiet())
    return spawned, Children(control)


def start(relay: str, parents: int, commands: list[list[str]]) -> tuple[SpawnedJob, Children]:
    """At the spawning root: create the job and start one process per command line (argv)."""
    spawned, children = create_job(relay, parents, len(commands))
    try:
        for slot, argv in enumerate(commands, start=parents):
            # The root's environment (the shim on PYTHONPATH, FMPI_* tuning) with the new slot's spec over its own.
            env = {**os.environ, **spawned.spec(slot).to_env()}
            children.processes.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))
    except OSError:
        for proc in children.processes:
            proc.kill()
        children.wait(0.0)
        raise
    return spawned, children


def create_meeting(relay: str, job: str, token: str, fill_timeout: float) -> Any:
    """Create the two-slot job at `relay` where an accepting root meets a connecting one (a port's Accept,
    api/ports.py); returns its JobControl, which the caller ends."""
    control = rendezvous.job_control(relay)
    control.create(job, token, 2, fill_timeout, Quiet())
    return control


def join_as_parent(spawned: SpawnedJob, index: int) -> RankSession:
    """Parent `index` (its rank in the spawning communicator) joins the spawned job."""
    return join(spawned.spec(index))
