"""fmpirun --max-runtime: a job longer than one launch runs as several, each continuing from the newest checkpoint.

A program that calls ``fmpi.checkpoint.save`` stops its world with
``RESUME_EXIT`` when its launch is about to hit the platform's time limit
(Lambda's function timeout; ``--timeout`` or the budget's end for local
ranks); this loop then
launches the same command again, with the same FMPI_CHECKPOINT_URL, until
the program ends some other way or the budget is spent.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from .. import settings
from .job import log
from .usage import UsageError

RESUME_EXIT = 75  # (fmpi.checkpoint.RESUME_EXIT: the launcher does not import numpy for one number)
TIMED_OUT = 124  # as timeout(1): the budget was spent, or a launch hit its function timeout
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("checkpoint/restart (fmpi.checkpoint; docs/checkpointing.md)")
    g.add_argument("--max-runtime", metavar="DURATION",
                   help="the job's wall-clock budget over all its launches (e.g. 3600, 90m, 4h, 1h30m): a launch that "
                        "stops at a checkpoint before its time limit is launched again from there")
    g.add_argument("--checkpoint-url", metavar="URL",
                   help="where the ranks keep their checkpoints (FMPI_CHECKPOINT_URL): file:///folder, "
                        "s3://bucket/prefix, redis://host:port/db (default: a fresh folder in FMPI_CACHE_DIR for "
                        "local ranks, s3://fmpi-code-ACCOUNT-REGION/checkpoints/... on Lambda; removed when the "
                        "job ends well). Give the same URL again to continue a job that ran out of --max-runtime")


def parse_duration(text: str) -> float:
    """'3600', '90s', '15m', '4h', '1h30m' -> seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or not match or not any(match.groups()):
        raise UsageError(f"--max-runtime {text!r}: give seconds or a duration such as 90m, 4h, 1h30m")
    hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + secs
    if total <= 0:
        raise UsageError(f"--max-runtime {text!r} must be positive")
    return total


def run(args: argparse.Namespace, launch: Callable[[argparse.Namespace], int],
        default_url: Callable[[argparse.Namespace], str]) -> int:
    """Launch until the program ends otherwise than at a checkpoint, or the budget is spent."""
    if args.max_runtime is None and args.checkpoint_url is None:
        return launch(args)
    if args.print_join or args.join or args.cleanup or args.dry_run:
        raise UsageError("--max-runtime and --checkpoint-url run a job: not with --print-join, --join, --cleanup or --dry-run")
    budget = parse_duration(args.max_runtime) if args.max_runtime is not None else None
    chosen = args.checkpoint_url is not None
    url = args.checkpoint_url or default_url(args)
    settings.export("FMPI_CHECKPOINT_URL", url)  # local ranks inherit it; Lambda ranks get every FMPI_* tuning variable
    try:
        margin = settings.checkpointing().margin
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.timeout is not None and margin >= args.timeout / 2:
        log(f"warning: FMPI_CHECKPOINT_MARGIN ({margin:g} s) leaves little of each {args.timeout} s launch: "
            "most launches will stop after one iteration")
    started = time.monotonic()
    launches = 0
    while True:
        launches += 1
        if args.backend == "local":  # (on Lambda the function timeout is the deadline)
            limits = [args.timeout or math.inf, math.inf if budget is None else budget - (time.monotonic() - started)]
            if min(limits) < math.inf:
                settings.export("FMPI_DEADLINE", str(time.time() + min(limits)))  # what fmpi.remaining_time() reads
        before = _newest_step(url)
        code = launch(args)
        spent = time.monotonic() - started
        if code == TIMED_OUT and budget is not None and _newest_step(url) != before:
            # The platform's time limit struck before a save() stopped the world (an iteration longer than the
            # margin foresaw): what the checkpoints hold is still consistent, so the job goes on from there.
            log(f"launch {launches} hit its time limit before a checkpoint stop (FMPI_CHECKPOINT_MARGIN may be "
                "too small for one iteration); continuing from the newest complete checkpoint")
            code = RESUME_EXIT
        if code != RESUME_EXIT:
            if code == 0 and not chosen:
                _remove(url)
            if launches > 1:
                log(f"the job ended after {launches} launches in {spent:.0f} s")
            return code
        if budget is None:
            log(f"the job stopped at a checkpoint ({url}); launch it again with --checkpoint-url {url} to continue")
            return code
        if spent >= budget:
            log(f"--max-runtime {args.max_runtime} spent after {launches} launches; the newest checkpoint is in {url}: "
                f"run the same command with --checkpoint-url {url} to continue")
            return TIMED_OUT
        log(f"launch {launches} stopped at a checkpoint after {spent:.0f} s; launching again "
            f"({budget - spent:.0f} s of --max-runtime left)")


def local_default_url(_args: argparse.Namespace) -> str:
    base = Path(settings.current().cache_dir or "~/.cache/fmpi").expanduser()
    return (base / "checkpoints" / uuid.uuid4().hex[:12]).resolve().as_uri()


def _newest_step(url: str) -> int | None:
    from ..checkpoint.api import MANIFEST
    from ..checkpoint.stores import open_store

    try:
        raw = open_store(url).get(MANIFEST)
        return None if raw is None else int(json.loads(raw)["step"])
    except Exception:  # noqa: BLE001 - unreadable: no progress to continue from
        return None


def _remove(url: str) -> None:
    """A checkpoint fmpirun chose itself is of no use once the job ended well."""
    from ..checkpoint.stores import open_store

    try:
        store = open_store(url)
        store.delete(store.keys())
    except Exception as exc:  # noqa: BLE001 - the job's result stands; say what was left behind
        log(f"warning: could not remove the checkpoints in {url}: {exc}")
