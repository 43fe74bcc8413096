"""The ACL user docs/redis-relay.md recommends per tenant: fmpi's jobs run under it, and it cannot spy or wipe.

The ``ACL SETUSER`` line is read from the doc itself, so the doc cannot rot.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tests_support import REPO, fmpirun_argv

PROGRAM = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
x = np.arange(4.0) + comm.rank
y = np.empty_like(x)
comm.Sendrecv(x, dest=1 - comm.rank, recvbuf=y, source=1 - comm.rank)
print(comm.rank, y.tolist(), comm.allreduce(comm.rank + 1), flush=True)
comm.Barrier()
"""


def doc_acl_line() -> list[str]:
    lines = [line.strip() for line in (REPO / "docs" / "redis-relay.md").read_text().splitlines()]
    found = [line for line in lines if line.startswith("ACL SETUSER")]
    assert len(found) == 1, found
    return shlex.split(found[0])


def test_the_documented_acl_user_runs_jobs_and_cannot_spy_or_wipe(redis_server, tmp_path: Path):
    url, admin = redis_server
    acl = doc_acl_line()
    user, password = acl[2], next(a[1:] for a in acl if a.startswith(">"))
    admin.execute_command(*acl)
    parts = urlsplit(url)
    tenant_url = f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    done = subprocess.run(
        fmpirun_argv("-n", "2", "--relay", tenant_url, "--channel", "relay", sys.executable, str(prog)),
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(done.stdout.splitlines()) == ["0 [1.0, 2.0, 3.0, 4.0] 3", "1 [0.0, 1.0, 2.0, 3.0] 3"]
    tenant = redis.Redis(host=parts.hostname, port=parts.port, username=user, password=password)
    admin.set("another:tenant", "theirs")
    for command in (("MONITOR",), ("FLUSHALL",), ("KEYS", "*"), ("GET", "another:tenant"), ("CONFIG", "SET", "save", "")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            tenant.execute_command(*command)
    tenant.close()
    assert admin.get("another:tenant") == b"theirs"
    assert admin.keys("fmpi:*") == []
