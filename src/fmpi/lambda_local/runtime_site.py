"""A stand-in for the AWS Python runtime's own packages (``/var/runtime`` on Lambda).

The Lambda Python runtime provides the runtime interface client and the AWS
SDK, nothing else: ``awslambdaric`` (+ ``simplejson``, ``snapshot-restore-py``)
and ``boto3`` (+ ``botocore``, ``s3transfer``, ``jmespath``,
``python-dateutil``, ``six``, ``urllib3``). ``build_runtime_site`` links
exactly these distributions from the current environment into one directory;
handlers run with ``python -S`` and that directory on ``PYTHONPATH``, so a
deployment zip that forgot fmpi, numpy or powertools fails here as on AWS.
"""

from __future__ import annotations

import os
from importlib import metadata

RUNTIME_DISTRIBUTIONS = (
    "awslambdaric",
    "simplejson",
    "snapshot-restore-py",
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "python-dateutil",
    "six",
    "urllib3",
)


def build_runtime_site(dest: str) -> str:
    """Symlink the runtime's distributions (top-level entries and metadata) into `dest`."""
    os.makedirs(dest, exist_ok=True)
    for name in RUNTIME_DISTRIBUTIONS:
        dist = metadata.distribution(name)
        tops = set()
        for f in dist.files or ():
            first = f.parts[0]
            if first in ("..", "__pycache__") or first.endswith(".pth"):
                continue
            tops.add(first)
        for top in sorted(tops):
            src = os.path.join(str(dist.locate_file("")), top)
            link = os.path.join(dest, top)
            if os.path.exists(src) and not os.path.lexists(link):
                os.symlink(src, link)
    return dest
