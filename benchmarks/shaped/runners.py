"""One program on every rank host of a shaped lab, under fmpi or under MPICH, each rank in its own namespace.

- fmpi: ``fmpi-relay`` and ``fmpirun --print-join`` on the relay host, and
  ``fmpirun --join`` on each rank host (tests/nat/labjob.py), so ranks link
  to each other across the shaped network as Lambda functions would.
- MPICH: ``mpiexec`` (hydra) on the relay host with ``-launcher ssh`` whose
  "ssh" is ``netns_ssh``: it starts hydra's proxy for host IP inside that
  host's namespace. Each host is a node of its own to hydra, so MPICH uses no
  shared memory between ranks; OFI's tcp provider on ``eth0`` carries
  everything, through the same delays and token buckets as fmpi.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab import REPO, ShapedLab

from labjob import LabJobs  # tests/nat, on the path through lab

BIN = Path(sys.executable).parent
NETNS_SSH = Path(__file__).resolve().parent / "netns_ssh"
MPICH_TCP = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"}


class Runners:
    """Runs programs on the first n rank hosts of `lab`; ``stop()`` ends the relay."""

    def __init__(self, lab: ShapedLab) -> None:
        self.lab = lab
        self.jobs = LabJobs(lab.lab)

    def stop(self) -> None:
        self.jobs.stop()

    def fmpi(self, n: int, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[bool, str]:
        """(ok, output) of ``argv`` (a Python script and its arguments) on n ranks under fmpi."""
        extra = dict(env)
        if n > (os.cpu_count() or 1):
            # More hosts than cores: a wait sleeps. fmpirun's polling, yielding waits (for ranks sharing a
            # host) burn the cores that the ranks with work and the delayers need while a message crosses
            # the shaped wire: at N = 4, 8 B allreduce 9.2-11.3 ms with them against 3.8-4.0 ms sleeping
            # (MPICH 2.8-5.4 ms), load 19. On Lambda every rank has its own CPU and spins 100 µs.
            extra.setdefault("FMPI_SPIN_US", "0")
        run = self.jobs.run(self.lab.hosts[:n], argv[0], list(argv[1:]), timeout=timeout, env=extra)
        ok = all(p.returncode == 0 for p in run.ranks)
        summary = next((line for line in run.launcher.stderr.splitlines() if "links:" in line), "")
        return ok, summary if ok else run.describe()[-4000:]

    def mpich(self, n: int, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[bool, str]:
        """(ok, output) of ``argv`` on n ranks under MPICH's mpiexec, one rank per host namespace."""
        hosts = self.lab.hosts[:n]
        full_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FMPI_")}
        full_env.update(MPICH_TCP)
        full_env.update(env)
        full_env["NETLAB_NAMESPACES"] = " ".join(f"{self.lab.ip(h)}={self.lab.lab.ns(h)}" for h in hosts)
        cmd = [
            str(BIN / "mpiexec"), "-launcher", "ssh", "-launcher-exec", str(NETNS_SSH),
            "-hosts", ",".join(self.lab.ip(h) for h in hosts), "-localhost", self.lab.lab.relay_ip,
            "-n", str(n), sys.executable, *argv,
        ]
        proc = self.lab.lab.popen(self.lab.lab.RELAY, cmd, env=full_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, cwd=str(REPO))
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            return False, f"mpiexec timed out after {timeout:.0f} s\n{out[-3000:]}"
        return proc.returncode == 0, out[-4000:]
