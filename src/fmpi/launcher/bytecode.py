"""Keep fmpi's own modules byte-compiled, so that every rank does not compile them again.

Python caches compiled modules as ``__pycache__/*.pyc`` next to the source,
but not when ``PYTHONDONTWRITEBYTECODE`` is set (common in containers) and
not for an editable install until a process writes them. Without the cache
every rank compiles all of fmpi from source at start-up: about 70 ms of CPU
per rank, paid N times over on a machine with fewer cores than ranks. A
non-editable ``pip install`` compiles at install time; this covers the rest.

Only fmpi's own directory is written, never the program's; where it is not
writable (a system install), nothing happens and the ranks compile as before.
"""

from __future__ import annotations

import sys
from pathlib import Path

FMPI_DIR = Path(__file__).resolve().parents[1]


def warm(package_dir: Path = FMPI_DIR) -> None:
    """Write missing or stale .pyc files of `package_dir` (when Python would not write them itself)."""
    if not sys.dont_write_bytecode:
        return  # the ranks' own imports write the cache
    import compileall

    # quiet=2: a read-only install is not an error worth a line on every run
    compileall.compile_dir(package_dir, quiet=2)
