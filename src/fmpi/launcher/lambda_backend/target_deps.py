"""The dependencies a rank needs, built for the Lambda runtime rather than copied from this machine.

numpy installed on a laptop is a build for that laptop: macOS or Windows
wheels, or a Linux wheel for a newer glibc than the runtime's (numpy 2.3+
needs glibc 2.27; the python3.11 runtime has 2.26). So fmpirun asks pip for
the wheels the runtime can load::

    pip install --target DIR --implementation cp --python-version 3.11 \\
        --platform manylinux2014_x86_64 --platform manylinux_2_26_x86_64 ... \\
        --only-binary=:all: numpy aws-lambda-powertools redis cryptography

and keeps the result in ``$FMPI_CACHE_DIR/lambda/deps/<key>`` (the key: the
requirements, the runtime and the architecture), so pip runs once per
combination. Packages the runtime already has (boto3 and its dependencies)
are left out of the zip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ...lambda_runtime.runtimes import Runtime

PIP_TIMEOUT = 600.0  # seconds: a cold cache downloads numpy


class DependencyBuildError(ValueError):
    """pip could not build the dependency set for the runtime; the message says what to do instead."""


def target_dependencies(requirements: tuple[str, ...], runtime: Runtime, architecture: str, cache: Path) -> tuple[Path, bool]:
    """(folder holding the installed wheels, whether it came from the cache) for `runtime` on `architecture`."""
    platforms = runtime.wheel_platforms(architecture)
    key = hashlib.sha256(json.dumps([sorted(requirements), runtime.name, architecture, platforms]).encode()).hexdigest()[:24]
    folder = cache / "deps" / f"{runtime.name}-{architecture}-{key}"
    if (folder / ".complete").is_file():
        return folder, True
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--target", str(tmp), "--implementation", "cp", "--python-version", runtime.version,
        "--only-binary=:all:", *(arg for p in platforms for arg in ("--platform", p)), *requirements,
    ]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DependencyBuildError(_failed(runtime, architecture, f"pip did not finish within {PIP_TIMEOUT:g} s")) from None
    except BaseException:  # Ctrl-C: pip is stopped, and nothing half-installed is left for the next run
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        said = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("WARNING: Location")]
        raise DependencyBuildError(_failed(runtime, architecture, "pip said: " + " | ".join(said[-4:])))
    shutil.rmtree(tmp / "bin", ignore_errors=True)  # console scripts: nothing a rank runs
    (tmp / ".complete").write_text(" ".join(requirements) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder, False


def _failed(runtime: Runtime, architecture: str, why: str) -> str:
    return (
        f"cannot build the dependencies for the {runtime.name} runtime on {architecture} ({why}). "
        "pip must reach a package index with Linux wheels for it. Alternatives: another --runtime or --arch; "
        "--deps local to copy this environment's packages (they must suit the runtime: checked before upload); "
        "or provide them from a layer (--layers ARN --no-bundle-deps)"
    )
