"""``fmpirun --backend lambda --dry-run``: what the package holds, before anything leaves the machine.

Every file of the program's folder is listed by name (that is where a secret
would hide); fmpi and each dependency get one line with their file count and
size; the totals say how the zip travels (in the API call, or through S3).
"""

from __future__ import annotations

import zipfile

from ...lambda_runtime.event import CODE_DIR
from .packaging import Bundle, direct_upload_limit, unzipped_limit


def describe_bundle(bundle: Bundle, runtime: str, architecture: str) -> str:
    program: list[tuple[str, int]] = []
    groups: dict[str, list[int]] = {}  # top-level folder -> [files, bytes]
    with zipfile.ZipFile(bundle.path) as zf:
        for info in zf.infolist():
            top, _, rest = info.filename.partition("/")
            if top == CODE_DIR and "__pycache__/" not in rest:
                program.append((rest, info.file_size))
            elif top != CODE_DIR:
                group = groups.setdefault(top if rest else "(top level)", [0, 0])
                group[0] += 1
                group[1] += info.file_size
    lines = [f"The package for the {runtime} runtime on {architecture} (dry run: nothing was deployed)", "",
             f"The program's folder ({CODE_DIR}/), {len(program)} files:"]
    lines += [f"  {name}  {_size(size)}" for name, size in program]
    lines += ["", "fmpi and the dependencies (compiled modules included):"]
    lines += [f"  {top}/  {files} files, {_size(size)}" for top, (files, size) in sorted(groups.items())]
    how = "through S3" if bundle.zipped_size > direct_upload_limit() else "in the API call"
    lines += [
        "",
        f"{bundle.files} files, {_size(bundle.unzipped_size)} unzipped (Lambda allows {_size(unzipped_limit())}), "
        f"{_size(bundle.zipped_size)} zipped: uploaded {how}",
        f"the zip: {bundle.path}",
        "Leave files out with a .fmpiignore (gitignore syntax) in the program's folder.",
    ]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
