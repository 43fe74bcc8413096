"""fmpirun's command line as mpiexec users type it: grouped help, --help-env, --version, -genv/-x,
--oversubscribe, and bad input as one line in fmpi's words with exit status 2 (the real fmpirun each time)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests_support import BIN, REPO, fmpirun_argv

from fmpi import __version__, settings

PY = sys.executable


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(fmpirun_argv(*args), capture_output=True, text=True, timeout=60, check=False, **kw)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--relay", "tcp://h:notaport"], "relay URL 'tcp://h:notaport': the port must be a number 1-65535, not 'notaport'"),
        (["--relay", "tcp://h:99999"], "the port must be a number 1-65535, not '99999'"),
        (["--relay", "tls://a:1,b:x"], "the port must be a number 1-65535, not 'x'"),
        (["--relay", "redis://:s3cret@h:1/x"], "numeric db"),
        (["--relay", "redis://h:99999/0"], "has an invalid port"),
        (["--relay-listen", "nonsense"], "--relay-listen needs HOST:PORT with a port 0-65535 (0: any free port), not 'nonsense'"),
        (["--relay-listen", "127.0.0.1:99999"], "not '127.0.0.1:99999'"),
        (["-n", "x"], "argument -n/-np: invalid int value: 'x' (see fmpirun --help)"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["--spare", "2"], "--spare is for the Lambda backends"),
        (["--spare", "-1"], "--spare must be 0 or more (got -1)"),
        (["--report", "cost.json"], "--report is for the Lambda backends"),
        (["--ranks-per-function", "2"], "--ranks-per-function is for the Lambda backends"),
        (["--ranks-per-function", "0"], "--ranks-per-function must be at least 1 (got 0)"),
        (["--ranks-per-function", "two"], "argument --ranks-per-function: invalid int value: 'two'"),
        (["--prices", "p.json"], "--prices is for the Lambda backends"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message):
    result = run("-n", "2", *args, PY, "-c", "pass")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr  # one line: no usage block, no traceback
    assert result.stderr.startswith("fmpirun: error: ") and message in result.stderr, result.stderr
    assert "s3cret" not in result.stderr


def test_a_file_that_is_not_executable_is_called_so():
    result = run("-n", "2", "./README.md", cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fmpirun: error: not executable: ./README.md (chmod +x it, or name its interpreter: fmpirun -n N python ./README.md)"
    )


def test_fmpi_relay_refuses_a_port_out_of_range():
    result = subprocess.run([str(BIN / "fmpi-relay"), "--port", "70000"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "--port must be 0-65535 (0: any free port), not 70000" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_is_grouped_like_mpiexecs():
    result = run("--help")
    assert result.returncode == 0
    text = result.stdout
    sections = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections[:5] == ["options:", "ranks:", "relay and channels:", "environment and output:",
                            "Lambda backends (--backend lambda|localstack; see docs/lambda.md):"], sections
    assert "number of ranks (required)" in text
    for scheme in ("tcp://", "tls://", "redis://", "rediss://"):
        assert scheme in text
    for spelling in ("-genv NAME VALUE", "-x VAR[=VALUE]", "--oversubscribe", "--help-env", "--version"):
        assert spelling in text
    assert "exit status:" in text and "124" in text and "128+S" in text


def test_help_env_prints_the_settings_table():
    result = run("--help-env")
    assert result.returncode == 0
    assert result.stdout == settings.help_text() + "\n"


def test_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"fmpirun (fmpi) {__version__}"


def test_genv_and_x_pass_variables_to_every_rank_and_oversubscribe_is_accepted():
    code = "import os; from mpi4py import MPI; print(os.environ['A'], os.environ['B'], os.environ['C'])"
    env = dict(os.environ, C="from-here")
    result = run("-n", "2", "--oversubscribe", "-genv", "A", "one value", "-x", "B=2", "-x", "C", PY, "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["one value 2 from-here"] * 2


def test_a_bad_join_is_usage_too():
    result = run("--join", "tcp://h:x", "--job", "j", "--size", "2", PY, "-c", "pass", env=dict(os.environ, FMPI_TOKEN="t" * 24))
    assert result.returncode == 2
    assert result.stderr.strip() == "fmpirun: error: relay URL 'tcp://h:x': the port must be a number 1-65535, not 'x'"
