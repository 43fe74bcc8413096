"""Coverage-guided fuzzing runs, bounded in time (the slow stage)."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
@pytest.mark.parametrize("target", ["relay_frame", "link_stream", "hello"])
def test_fuzz_target_finds_no_crash(target, tmp_path):
    pytest.importorskip("atheris", reason="atheris is installed by the test extras")
    result = subprocess.run(
        [sys.executable, str(HERE / "fuzz_main.py"), target, "-max_total_time=45", "-timeout=10", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr or "done" in result.stderr.lower()
