"""What Lambda enforces on a function, enforced on one local invocation.

* **memory**: the function's memory size is a hard limit; a process that
  goes over it is killed (AWS: ``Runtime.OutOfMemory``). Here: a memory
  cgroup (v1 or v2) per invocation, with swap off.
* **the code folder is read-only**, and ``/tmp`` is the only writable place,
  with a size limit (512 MB by default, the function's ephemeral storage).
  Here: a private mount namespace (``unshare -m``) in which the code and
  layer folders are bind-mounted read-only and a size-limited tmpfs is
  mounted on ``/tmp`` (what the emulator itself keeps under /tmp is bound
  into it, so the runtime still finds its files).
* **no shared memory between functions**: Lambda has no ``/dev/shm``. Here
  each sandbox gets an empty read-only one of its own, so ranks of one job
  never share memory lanes, as on Lambda.
* **a function's vCPUs**: Lambda gives a function one vCPU per 1769 MB of
  memory (six at most), and numeric libraries start one thread per CPU they
  see. Here each invocation is pinned to that many of this machine's cores,
  taken round robin (``function_cpus``): four 1-vCPU functions on two cores
  then run one BLAS thread each, as on Lambda, not two each spinning against
  the others' (k-means ran 10x slower so, and a 10 s function timeout left
  it a tenth of the work it would do on Lambda). Needs no root.
* **the runtime's glibc and architecture**: a library the runtime could not
  load fails to import, with glibc's message (``elf_guard``, set up by the
  process's boot code from ``_EMU_GLIBC``/``_EMU_ARCH``).

Cgroups and mounts need root. Without it the code folder is made read-only
by its permissions, and memory and /tmp are not limited: ``capabilities()``
says so, and ``fmpi-lambda-local`` prints it when it starts.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

STAGES = Path("/run/fmpi-lambda-local")  # where each sandbox's /tmp is made before it is moved over /tmp
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
GROUP = "fmpi-lambda-local"
DEFAULT_TMP_MB = 512  # Lambda's default ephemeral storage

# Runs as the sandbox's first process, in its own mount namespace: the new /tmp is made on a stage folder,
# the folders to keep are bound into it, it is moved over /tmp, then the code folders become read-only.
MOUNT_SCRIPT = r"""
set -e
mount --make-rprivate /
stage=$1; tmp_mb=$2; keep=$3; readonly=$4; shift 4
mount -t tmpfs -o "size=${tmp_mb}m,mode=1777" fmpi-lambda-tmp "$stage"
for dir in $keep; do mkdir -p "$stage${dir#/tmp}"; mount --rbind "$dir" "$stage${dir#/tmp}"; done
mount --move "$stage" /tmp
if [ -d /dev/shm ]; then mount -t tmpfs -o ro,size=4k fmpi-lambda-no-shm /dev/shm; fi
for dir in $readonly; do mount --bind "$dir" "$dir"; mount -o remount,bind,ro "$dir"; done
exec "$@"
"""


MB_PER_VCPU, MAX_VCPUS = 1769, 6  # Lambda: one vCPU per 1769 MB of memory, six at 10240 MB
_next_first_cpu = itertools.count()


def function_cpus(memory_mb: int, host: list[int] | None = None) -> frozenset[int]:
    """The cores of this machine one invocation of a `memory_mb` function is pinned to: as many as the vCPUs
    the memory buys (at least one, at most the machine's), the next ones round robin after the last
    invocation's."""
    cores = sorted(os.sched_getaffinity(0)) if host is None else host
    count = min(len(cores), max(1, min(MAX_VCPUS, round(memory_mb / MB_PER_VCPU))))
    first = next(_next_first_cpu) * count
    return frozenset(cores[(first + i) % len(cores)] for i in range(count))


def is_root() -> bool:
    return os.geteuid() == 0


def capabilities() -> dict[str, bool]:
    """Which limits this machine lets us enforce (root: all of them)."""
    root = is_root()
    return {
        "memory": root and _cgroup_root() is not None,
        "tmp": root and shutil.which("unshare") is not None and shutil.which("mount") is not None
        and STAGES.parent.is_dir(),
        "read_only_code": True,
    }


@dataclass
class Sandbox:
    """One invocation's confinement: ``command()`` wraps its argv, ``enter()`` runs in the child before exec."""

    work_dir: str
    request_id: str
    memory_mb: int
    read_only: list[str]
    keep: list[str] = field(default_factory=list)
    tmp_mb: int = DEFAULT_TMP_MB
    enforce: dict[str, bool] = field(default_factory=capabilities)
    cpus: frozenset[int] | None = None  # the cores it is pinned to (``function_cpus``; None: all)
    cgroup: Path | None = None
    _procs_fd: int | None = None

    def __post_init__(self) -> None:
        if self.enforce["memory"]:
            self.cgroup = _make_cgroup(self.request_id, self.memory_mb)
        if self.cgroup is not None:
            # Opened here: the child only writes to it (writing "0" moves the writer), nothing to allocate after fork.
            self._procs_fd = os.open(self.cgroup / "cgroup.procs", os.O_WRONLY)

    @property
    def private_tmp(self) -> bool:
        return self.enforce["tmp"]

    def command(self, argv: list[str]) -> list[str]:
        if not self.private_tmp:
            return argv
        stage = str(STAGES / self.request_id)  # outside /tmp: not inside a folder bound into it
        os.makedirs(stage, exist_ok=True)
        keep = sorted({os.path.realpath(d) for d in self.keep if _under_tmp(d)})
        return ["unshare", "-m", "sh", "-c", MOUNT_SCRIPT, "fmpi-sandbox", stage, str(self.tmp_mb),
                " ".join(map(shlex.quote, keep)), " ".join(map(shlex.quote, self.read_only)), *argv]

    def enter(self) -> None:
        """In the child, before exec: join the memory cgroup (its limit then covers everything the runtime starts)
        and take the function's cores (every thread and process it starts inherits them)."""
        if self._procs_fd is not None:
            os.write(self._procs_fd, b"0")
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)

    def out_of_memory(self) -> bool:
        if self.cgroup is None:
            return False
        for name in ("memory.events", "memory.oom_control"):
            path = self.cgroup / name
            if path.is_file():
                for line in path.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip() not in ("", "0"):
                        return True
        return False

    def close(self) -> None:
        if self._procs_fd is not None:
            os.close(self._procs_fd)
            self._procs_fd = None
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:
                pass  # a process still inside: the next start of the emulator removes it
        if self.private_tmp:
            try:
                (STAGES / self.request_id).rmdir()  # (the mount lived in the sandbox's namespace only)
            except OSError:
                pass


def make_read_only(folder: str) -> None:
    """Without root (no mount namespace): take the write bits off an extracted code folder."""
    for dirpath, _dirnames, _filenames in os.walk(folder):
        os.chmod(dirpath, 0o555)


def _under_tmp(path: str) -> bool:
    real = os.path.realpath(path)
    return real == "/tmp" or real.startswith("/tmp/")


def _cgroup_root() -> Path | None:
    if (CGROUP_V1 / "memory.limit_in_bytes").is_file():
        return CGROUP_V1
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.is_file() and "memory" in controllers.read_text().split():
        return CGROUP_V2
    return None


def _make_cgroup(request_id: str, memory_mb: int) -> Path | None:
    root = _cgroup_root()
    if root is None:
        return None
    parent = root / GROUP
    try:
        parent.mkdir(exist_ok=True)
        if root == CGROUP_V2:
            (root / "cgroup.subtree_control").write_text("+memory")
            (parent / "cgroup.subtree_control").write_text("+memory")
        group = parent / request_id
        group.mkdir()
        limit = str(memory_mb * 1024 * 1024)
        if root == CGROUP_V2:
            (group / "memory.max").write_text(limit)
            (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(limit)
            if (group / "memory.memsw.limit_in_bytes").is_file():
                (group / "memory.memsw.limit_in_bytes").write_text(limit)
        return group
    except OSError:
        return None  # cgroups not writable here (a container): memory is not limited


def remove_stale_cgroups() -> None:
    """Cgroups of invocations of an emulator that was killed (empty ones only: rmdir refuses the others)."""
    root = _cgroup_root()
    if root is None or not (root / GROUP).is_dir():
        return
    for group in (root / GROUP).iterdir():
        if group.is_dir():
            try:
                group.rmdir()
            except OSError:
                pass
