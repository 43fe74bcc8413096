"""The Lambda Python runtimes fmpi deploys to: their Python, their operating system's glibc, their architectures.

One table, read by the launcher (which wheels to build, which libraries
will load) and by the local Lambda endpoint (which libraries it must refuse
to load, as the real runtime would).
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

ARCHITECTURES = ("x86_64", "arm64")
#: pip's name of each architecture, in wheel platform tags (manylinux2014_x86_64, manylinux2014_aarch64).
WHEEL_MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Runtime:
    name: str  # "python3.12"
    python: tuple[int, int]
    glibc: tuple[int, int]
    system: str

    @property
    def version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    def glibc_text(self) -> str:
        return f"{self.glibc[0]}.{self.glibc[1]}"

    def wheel_platforms(self, architecture: str) -> list[str]:
        """pip ``--platform`` values for binary wheels that load here: every manylinux up to this glibc.

        pip does not expand ``manylinux_2_34`` to the older tags itself, so each one is named.
        """
        machine = WHEEL_MACHINE[architecture]
        tags = [f"manylinux2014_{machine}"]
        tags += [f"manylinux_2_{minor}_{machine}" for minor in range(self.glibc[1], 4, -1)]
        return tags


_AL2 = "Amazon Linux 2"
_AL2023 = "Amazon Linux 2023"
RUNTIMES: dict[str, Runtime] = {
    r.name: r
    for r in (
        Runtime("python3.11", (3, 11), (2, 26), _AL2),
        Runtime("python3.12", (3, 12), (2, 34), _AL2023),
        Runtime("python3.13", (3, 13), (2, 34), _AL2023),
        Runtime("python3.14", (3, 14), (2, 34), _AL2023),
    )
}


def runtime_named(name: str) -> Runtime:
    """The runtime called `name`; ValueError naming the choices for anything else."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown Lambda runtime {name!r}: choose one of {', '.join(RUNTIMES)}") from None


def default_runtime() -> Runtime:
    """This interpreter's version (the zip's compiled modules are this interpreter's), if Lambda offers it."""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return RUNTIMES.get(name, RUNTIMES["python3.12"])


def default_architecture() -> str:
    """This machine's architecture: what a local build of binaries would suit."""
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
