"""``python -m fmpi ...`` is ``fmpirun ...``."""

from .launcher.cli import entry

entry()
