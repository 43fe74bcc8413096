"""Every shared library in the package must load on the runtime: its machine, and the glibc symbol versions it needs.

Checked before anything is uploaded, on every backend (the emulators run
functions on this machine's glibc, so they would not notice): a library
built for a newer glibc than the runtime's fails on Lambda only when it is
imported ("version `GLIBC_2.27' not found"), which is the first rank, after
the deployment, the upload and the wait.
"""

from __future__ import annotations

from pathlib import Path

from ...lambda_runtime.runtimes import RUNTIMES, Runtime
from ...util.elf import NotElf, is_shared_library_name, library_needs

SHOWN = 4  # offending libraries named in the message


class LibraryMismatch(ValueError):
    """A library in the package will not load on the chosen runtime; the message says which and what to do."""


def check_libraries(entries: dict[str, Path], runtime: Runtime, architecture: str) -> None:
    """Raise ``LibraryMismatch`` naming the libraries of `entries` (arcname -> file) that cannot load."""
    problems: list[str] = []
    newest_needed = runtime.glibc
    for arcname in sorted(entries):
        if not is_shared_library_name(arcname):
            continue
        try:
            needs = library_needs(entries[arcname])
        except NotElf:
            problems.append(f"{arcname} is not a Linux library (built for another system)")
            continue
        if needs.machine != architecture:
            problems.append(f"{arcname} is built for {needs.machine}, not {architecture}")
        elif needs.glibc is not None and needs.glibc > runtime.glibc:
            problems.append(f"{arcname} needs glibc {needs.glibc_text()}")
            newest_needed = max(newest_needed, needs.glibc)
    if not problems:
        return
    more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
    raise LibraryMismatch(
        f"{len(problems)} shared {'library' if len(problems) == 1 else 'libraries'} in the package cannot load on "
        f"the {runtime.name} runtime ({runtime.system}, glibc {runtime.glibc_text()}, {architecture}): "
        + "; ".join(problems[:SHOWN]) + more + ". " + _fix(runtime, newest_needed)
    )


def _fix(runtime: Runtime, needed: tuple[int, int]) -> str:
    newer = [r.name for r in RUNTIMES.values() if r.glibc >= needed and r.glibc > runtime.glibc]
    choices = [
        "let fmpirun build the dependencies for the runtime (the default: leave out --deps local)",
        f"choose a runtime with a newer glibc (--runtime {newer[0]})" if newer else "",
        "provide the libraries from a layer built for the runtime (--layers ARN --no-bundle-deps)",
        "or leave binaries built on this machine out of the program's folder (.fmpiignore)",
    ]
    return "Fix: " + "; ".join(c for c in choices if c)
