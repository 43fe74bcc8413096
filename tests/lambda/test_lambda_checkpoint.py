"""A job longer than the function timeout, on emulated Lambda: checkpoints in S3, several launches, the same result.

The functions run under the emulator's enforced timeout (a few seconds
here, 900 s on AWS); fmpirun --max-runtime relaunches the world from the
newest complete checkpoint until k-means ends, and its result is
bit-identical to an uninterrupted local run.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from lambda_testing import FMPIRUN, aws_env, kmeans_lasting

FUNCTION_TIMEOUT = 10


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_40_second_kmeans_under_a_10_second_function_timeout_is_relaunched_from_s3_and_bit_identical(
        lambda_run, moto, bundle_cache):
    kmeans = kmeans_lasting(40)
    t0 = time.monotonic()
    whole = subprocess.run([FMPIRUN, "-n", "4", "python", *kmeans], capture_output=True, text=True, timeout=600,
                           check=False)
    uninterrupted = time.monotonic() - t0
    assert whole.returncode == 0, whole.stderr
    env = aws_env(moto.endpoint_url, bundle_cache, FMPI_CHECKPOINT_EVERY="4", FMPI_CHECKPOINT_MARGIN="2")
    run = lambda_run(4, kmeans[0], *kmeans[1:], extra=("--timeout", str(FUNCTION_TIMEOUT), "--fill-timeout", "8",
                                                       "--max-runtime", "1200"), env=env, timeout=1300)
    assert run.returncode == 0, run.stderr
    launches = int(re.search(r"the job ended after (\d+) launches", run.stderr).group(1))
    # (sized to about 40 s uninterrupted on this machine; what the test needs is several launches)
    assert launches >= 3, f"{launches} launches for a job of {uninterrupted:.0f} s uninterrupted\n{run.stderr}"
    result = next(line for line in run.stdout.splitlines() if line.startswith("kmeans "))
    assert result == next(line for line in whole.stdout.splitlines() if line.startswith("kmeans "))
    assert "stopped at the checkpoint of step" in run.stderr, run.stderr  # the policy stopped the world in time
    s3 = moto.client("s3")
    bucket = "fmpi-code-123456789012-us-east-1"
    left = s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/").get("KeyCount", 0)
    assert left == 0, "a checkpoint fmpirun chose itself is removed when the job ends well"
    assert os.environ.get("FMPI_CHECKPOINT_URL") is None
