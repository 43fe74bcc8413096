"""fmpirun's exit status follows the table its --help prints (and docs/getting-started.md shows): each row, for real."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests_support import REPO, fmpirun_argv

PY = sys.executable

WORLD_THAT_NEVER_FILLS = (
    "import os, time\n"
    "if os.environ['FMPI_RANK'] == '1':\n"
    "    time.sleep(120)  # never joins\n"
    "from mpi4py import MPI\n"
)


def _help_rows() -> dict[str, str]:
    text = subprocess.run(fmpirun_argv("--help"), capture_output=True, text=True, timeout=60, check=True).stdout
    table = text.split("exit status:\n", 1)[1].split("\n\n", 1)[0]
    return dict(re.match(r"\s+(\S+)\s+(.*)", line).groups() for line in table.splitlines())


@pytest.mark.parametrize(
    "row, args, status, words",
    [
        ("0", ["-n", "2", PY, "-c", "from mpi4py import MPI"], 0, ""),
        ("N", ["-n", "2", PY, "-c", "import os; from mpi4py import MPI; MPI.COMM_WORLD.rank == 1 and os._exit(5)"], 5,
         "rank 1 exited with status 5"),
        ("128+S", ["-n", "2", PY, "-c", "import os; from mpi4py import MPI; MPI.COMM_WORLD.rank == 1 and os.kill(os.getpid(), 15)"],
         143, "rank 1 was killed by signal SIGTERM"),
        ("1", ["-n", "2", "--relay", "tcp://127.0.0.1:1", PY, "-c", "pass"], 1, "cannot reach the relay"),
        ("2", ["-n", "0", PY, "-c", "pass"], 2, "-n must be at least 1"),
        ("75", ["-n", "2", "--timeout", "1", "--checkpoint-url", "{ckpt}", PY, "-c",
                "from fmpi import checkpoint; checkpoint.save({'x': 1}, 1)"], 75, "the job stopped at a checkpoint"),
        ("124", ["-n", "2", "--fill-timeout", "4", PY, "-c", WORLD_THAT_NEVER_FILLS], 124, "did not fill within 4 s"),
        ("127", ["-n", "2", "{not_a_program}"], 127, "cannot start"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 8 else None,
)
def test_exit_status_follows_the_documented_table(tmp_path, row, args, status, words):
    assert row in _help_rows()
    not_a_program = tmp_path / "not-a-program"  # executable, but no format the kernel runs
    not_a_program.write_bytes(b"\x00\x01 not an executable\n")
    not_a_program.chmod(0o755)
    argv = [a.replace("{not_a_program}", str(not_a_program)).replace("{ckpt}", (tmp_path / "ckpt").as_uri()) for a in args]
    result = subprocess.run(fmpirun_argv(*argv), capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == status, result.stderr
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_getting_started_shows_the_table_fmpirun_prints():
    table = "exit status:\n" + "\n".join(f"  {code:<6} {meaning}" for code, meaning in _help_rows().items())
    assert table in (REPO / "docs" / "getting-started.md").read_text()
