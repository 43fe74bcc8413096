"""The event that starts one rank on Lambda: a ``RankSpec`` plus what to run and until when.

    {"fmpi": 1,
     "job": ..., "rank": 3, "size": 8, "relay": "tcp://...", "token": ...,   # the RankSpec (rank -1: a spare)
     "incarnation": ..., "fill_timeout": 60.0,
     "deadline": 1767225600.0,          # epoch seconds: the world must be full by then
     "program": {"script": "train.py", "args": ["--epochs", "3"]},   # or {"module": "pkg.main", ...}
     "fanout": {"ranks": [0, 64], "arity": 8},                      # optional: invoke ranks 1..63 too
     "per_function": 4,                                             # optional: this invocation runs ranks 3..6
     "env": {"FMPI_CHANNEL": "relay", "MY_VAR": "1"},                # optional: the program's environment
     "tls_ca": "-----BEGIN CERTIFICATE-----...",                    # optional: the CA of a tls:// relay
     "log_output": false}                                           # optional: no program output to CloudWatch

``per_function`` (fmpirun --ranks-per-function K): the invocation runs
ranks ``rank .. rank+K-1`` (fewer at the world's end): itself in-process and
the others as processes it starts (``siblings``); the fan-out tree then splits
its blocks on function boundaries, so every block starts with a function.

``env`` carries fmpirun's ``-x VAR`` / ``--env VAR=VALUE`` and its FMPI_*
tuning variables: a function has no environment of the launcher's.

The launcher builds it (``RankEvent.to_event``), the handler validates it
(``RankEvent.from_event``): anything malformed raises ``EventError`` with one
message naming the field, before any I/O.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..rank.spec import RankSpec, SpecError

EVENT_VERSION = 1
CODE_DIR = "app"  # the program's directory inside the deployment zip
# mpi4py's pure-Python modules (futures, util, run) inside the zip, for the shim to load against fmpi.MPI
MPI4PY_PYTHON_DIR = "fmpi_mpi4py"
# Rank -> launcher progress reports ride on OUTPUT frames of this stream name.
STATUS_STREAM = "fmpi.status"


# Names Lambda sets for the function itself: an event may not change them (credentials, region, runtime paths).
RESERVED_ENV_PREFIXES = ("AWS_", "LAMBDA_", "_")


class EventError(ValueError):
    """A rank event that cannot be served (missing or invalid field)."""


def check_environment(env: Any) -> dict[str, str]:
    """`env` as a {name: value} of strings, or EventError naming what is wrong (also used on fmpirun's -x/--env)."""
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise EventError("'env' must be an object of string values")
    for name in env:
        if not name or "=" in name or "\0" in name:
            raise EventError(f"{name!r} is not an environment variable name")
        if name.startswith(RESERVED_ENV_PREFIXES) or name in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "TZ"):
            raise EventError(f"{name} is set by Lambda for the function; it cannot be passed to ranks")
    return dict(env)


@dataclass(frozen=True)
class Program:
    """What a rank runs: a script (path inside the bundle's code directory) or a module, with its arguments."""

    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.script is None) == (self.module is None):
            raise EventError("program needs exactly one of 'script' and 'module'")
        if self.script is not None:
            norm = posixpath.normpath(self.script)
            if not self.script or posixpath.isabs(norm) or norm.startswith(".."):
                raise EventError(f"program script must be a relative path inside the code directory, not {self.script!r}")
        if self.module is not None and not all(part.isidentifier() for part in self.module.split(".")):
            raise EventError(f"program module {self.module!r} is not a module name")

    @property
    def argv(self) -> list[str]:
        """sys.argv for the program (argv[0] as `python script.py` / `python -m module` would set it)."""
        return [self.script or self.module or "", *self.args]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"args": list(self.args)}
        if self.script is not None:
            body["script"] = self.script
        else:
            body["module"] = self.module
        return body

    @classmethod
    def from_json(cls, raw: Any) -> Program:
        if not isinstance(raw, Mapping):
            raise EventError("rank event lacks 'program' (an object with 'script' or 'module', and 'args')")
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise EventError("program 'args' must be a list of strings")
        script, module = raw.get("script"), raw.get("module")
        if script is not None and not isinstance(script, str) or module is not None and not isinstance(module, str):
            raise EventError("program 'script' and 'module' must be strings")
        return cls(script=script, module=module, args=tuple(args))


@dataclass(frozen=True)
class Fanout:
    """Ranks ``lo..hi-1`` are this rank's subtree of the invocation tree; this rank is ``lo``."""

    lo: int
    hi: int
    arity: int
    step: int = 1  # ranks per function: a subtree starts on a function's first rank

    def __post_init__(self) -> None:
        if not 0 <= self.lo < self.hi:
            raise EventError(f"fanout range [{self.lo}, {self.hi}) is empty or negative")
        if self.arity < 1:
            raise EventError(f"fanout arity must be at least 1, not {self.arity}")
        if self.step < 1 or self.lo % self.step:
            raise EventError(f"fanout range starts at {self.lo}, not on a function of {self.step} ranks")

    def children(self) -> list[Fanout]:
        """Split the rest of the subtree (the functions after this one's) into at most `arity` contiguous subtrees."""
        return split(self.lo + self.step, self.hi, self.arity, self.step)

    @property
    def functions(self) -> int:
        return -(-(self.hi - self.lo) // self.step)


def split(lo: int, hi: int, arity: int, step: int = 1) -> list[Fanout]:
    """Ranks lo..hi-1 (lo on a function's first rank) as at most `arity` contiguous subtrees of nearly equal
    numbers of functions of `step` ranks (the last function of the world may hold fewer)."""
    first, n = lo // step, -(-(hi - lo) // step)
    if n <= 0:
        return []
    parts = min(arity, n)
    size = n / parts
    bounds = [(first + math.floor(i * size)) * step for i in range(parts)] + [hi]
    return [Fanout(bounds[i], min(bounds[i + 1], hi), arity, step) for i in range(parts)]


@dataclass(frozen=True)
class RankEvent:
    spec: RankSpec
    program: Program
    deadline: float  # epoch seconds by which the world must be full
    fanout: Fanout | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the program's environment (and FMPI_*)
    tls_ca: str | None = None  # PEM of the CA a tls:// relay's certificate is signed by
    log_output: bool = True  # also write the program's output to the function's log (CloudWatch)
    per_function: int = 1  # ranks this invocation runs (fmpirun --ranks-per-function), itself first

    def __post_init__(self) -> None:
        if self.per_function < 1:
            raise EventError(f"'per_function' must be at least 1, not {self.per_function}")
        if self.per_function > 1 and self.spec.rank < 0:
            raise EventError("a spare (rank -1) runs one rank: 'per_function' must be 1")
        if self.fanout is not None:
            if self.fanout.lo != self.spec.rank:
                raise EventError(f"fanout range starts at {self.fanout.lo}, but this is rank {self.spec.rank}")
            if self.fanout.hi > self.spec.size:
                raise EventError(f"fanout range ends at {self.fanout.hi}, beyond the world of {self.spec.size}")

    def to_event(self) -> dict[str, Any]:
        event: dict[str, Any] = {"fmpi": EVENT_VERSION, **self.spec.to_event()}
        event["deadline"] = self.deadline
        event["program"] = self.program.to_json()
        if self.fanout is not None:
            event["fanout"] = {"ranks": [self.fanout.lo, self.fanout.hi], "arity": self.fanout.arity}
        if self.env:
            event["env"] = dict(self.env)
        if self.tls_ca:
            event["tls_ca"] = self.tls_ca
        if not self.log_output:
            event["log_output"] = False
        if self.per_function > 1:
            event["per_function"] = self.per_function
        return event

    @property
    def local_ranks(self) -> range:
        """The ranks this invocation runs: itself, then the ones its sibling processes run."""
        return range(self.spec.rank, min(self.spec.rank + self.per_function, self.spec.size))

    def for_subtree(self, sub: Fanout) -> RankEvent:
        """The event of the rank heading subtree `sub` (a fresh incarnation: a new invocation)."""
        spec = dataclasses.replace(self.spec, rank=sub.lo, incarnation=uuid.uuid4().hex)
        return dataclasses.replace(self, spec=spec, fanout=sub if sub.functions > 1 else None)

    def for_sibling(self, rank: int) -> RankEvent:
        """The event a sibling process runs: one rank of this invocation's, no subtree, no siblings of its own."""
        spec = dataclasses.replace(self.spec, rank=rank, incarnation=uuid.uuid4().hex)
        return dataclasses.replace(self, spec=spec, fanout=None, per_function=1)

    def spare(self) -> RankEvent:
        """The event of a spare rank (``fmpirun --spare``): it takes whichever slot is free when it joins, or, once
        the world is complete, exits at once (a fresh incarnation: a new invocation)."""
        spec = dataclasses.replace(self.spec, rank=-1, incarnation=uuid.uuid4().hex)
        return dataclasses.replace(self, spec=spec, fanout=None)

    @classmethod
    def from_event(cls, event: Any) -> RankEvent:
        if not isinstance(event, Mapping):
            raise EventError(f"the event must be a JSON object, not {type(event).__name__}")
        version = event.get("fmpi")
        if version != EVENT_VERSION:
            raise EventError(
                f"not an fmpi rank event (field 'fmpi' is {version!r}, expected {EVENT_VERSION}); "
                "rank events come from fmpirun --backend lambda"
            )
        if event.get("rank") is not None and isinstance(event.get("rank"), bool):
            raise EventError("rank must be an integer")
        try:
            spec = RankSpec.from_mapping(event, "event")
        except SpecError as exc:
            raise EventError(str(exc)) from None
        deadline = event.get("deadline")
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or not math.isfinite(deadline):
            raise EventError("rank event lacks 'deadline' (epoch seconds by which the world must be full)")
        program = Program.from_json(event.get("program"))
        per_function = event.get("per_function", 1)
        if not isinstance(per_function, int) or isinstance(per_function, bool):
            raise EventError("'per_function' must be an integer")
        fanout = None
        raw = event.get("fanout")
        if raw is not None:
            try:
                lo, hi = raw["ranks"]
                fanout = Fanout(int(lo), int(hi), int(raw.get("arity", 2)), max(1, per_function))
            except (TypeError, ValueError, KeyError):
                raise EventError("fanout must be {'ranks': [lo, hi], 'arity': k}") from None
        env = check_environment(event.get("env") or {})
        tls_ca = event.get("tls_ca")
        if tls_ca is not None and not (isinstance(tls_ca, str) and "BEGIN CERTIFICATE" in tls_ca):
            raise EventError("'tls_ca' must be a PEM certificate")
        log_output = event.get("log_output", True)
        if not isinstance(log_output, bool):
            raise EventError("'log_output' must be true or false")
        return cls(spec, program, float(deadline), fanout, env, tls_ca, log_output, per_function)
