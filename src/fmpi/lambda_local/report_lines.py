"""The lines Lambda ends an invocation's log with (END, REPORT, a timeout's), and the peak memory they report."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from .executor import FunctionSpec
    from .runtime_api import Invocation


def write_report(log_f: BinaryIO, inv: Invocation, spec: FunctionSpec, init_ms: float, dur_ms: float,
                 vm_hwm_kb: int | None) -> None:
    """The lines Lambda ends an invocation's log with (a timeout's, END, REPORT)."""
    if inv.outcome == "timeout":
        log_f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {inv.request_id} "
                    f"Task timed out after {spec.timeout_s:.2f} seconds\n".encode())
    log_f.write(f"END RequestId: {inv.request_id}\n".encode())
    mem = f"{vm_hwm_kb // 1024} MB" if vm_hwm_kb else "n/a"
    # Billed: rounded up to the millisecond, the init phase included (as Lambda bills on-demand functions since
    # August 2025; every emulated invocation starts cold, so each has an Init Duration).
    billed = math.ceil(init_ms + dur_ms)
    log_f.write((f"REPORT RequestId: {inv.request_id}\tDuration: {dur_ms:.2f} ms\t"
                 f"Billed Duration: {billed} ms\tMemory Size: {spec.memory_mb} MB\t"
                 f"Max Memory Used: {mem}\tInit Duration: {init_ms:.2f} ms\n").encode())


def peak_memory_kb(pid: int) -> int | None:
    """The process's peak resident memory (VmHWM), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
