"""Which files of the program's folder are deployed: never secrets, environments or caches by default.

The program's folder (the script's, or ``--code DIR``) often holds things
that must not leave the laptop: ``.env``, ``.aws/credentials``,
``.ssh/id_ed25519``, a virtualenv, a ``.git`` history. Left out by default:

* every file or folder whose name starts with a dot (dotfiles, ``.git``,
  ``.venv``, ``.aws``, ...);
* virtual environments (any folder holding a ``pyvenv.cfg``), ``venv``,
  ``env``, ``node_modules``, ``__pycache__``, ``*.egg-info``, compiled
  ``.pyc`` files.

A ``.fmpiignore`` file in the folder adds patterns in gitignore syntax (read
with ``pathspec``, as git reads ``.gitignore``), and may take a default back
with ``!``: ``!.streamlit/`` ships that folder, ``!.env.example`` that file.
``fmpirun --backend lambda --dry-run`` lists what goes in.
"""

from __future__ import annotations

import os
from pathlib import Path

IGNORE_FILE = ".fmpiignore"
# gitignore patterns applied before the user's: a later "!pattern" in .fmpiignore takes one back.
DEFAULT_PATTERNS = (
    ".*",
    "__pycache__/",
    "*.py[cod]",
    "*.egg-info/",
    "venv/",
    "env/",
    "node_modules/",
)


class IgnoreFileError(ValueError):
    """The folder's .fmpiignore cannot be read or parsed."""


def program_files(code_dir: Path) -> dict[str, Path]:
    """Relative POSIX path -> file, for every file of `code_dir` that is deployed (sorted walk)."""
    spec = _spec(code_dir)
    chosen: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(code_dir, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(code_dir).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(
            d for d in dirnames
            if not spec.match_file(prefix + d + "/") and not (here / d / "pyvenv.cfg").exists()
        )
        for name in sorted(filenames):
            path = here / name
            if path.is_file() and not spec.match_file(prefix + name):
                chosen[prefix + name] = path
    return chosen


def _spec(code_dir: Path):
    try:
        import pathspec
    except ImportError:
        raise IgnoreFileError("the Lambda backends need pathspec to read .fmpiignore: pip install 'fmpi[aws]'") from None
    lines = list(DEFAULT_PATTERNS)
    ignore = code_dir / IGNORE_FILE
    if ignore.is_file():
        try:
            lines += ignore.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise IgnoreFileError(f"cannot read {ignore}: {exc}") from None
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception as exc:  # noqa: BLE001 - pathspec's own error types differ between versions
        raise IgnoreFileError(f"{ignore}: {exc}") from None
