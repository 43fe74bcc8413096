"""What fmpirun prints about a job besides the program's output: a live line on a terminal (wiped before the ranks
print), nothing when stderr is not a terminal, readable lines with -v (each link once, the links summary last)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests_support import REPO, fmpirun_argv

PY = sys.executable
HELLO = str(REPO / "docs" / "examples" / "hello.py")
GREETING = "rank 2 of 3 got {'greeting': 'hello'}, sum of ranks 3"


def _on_a_terminal(*args: str) -> tuple[str, str, int]:
    """(stdout, what fmpirun wrote to its terminal stderr, exit status) of fmpirun with stderr on a pseudo-terminal."""
    master, slave = os.openpty()
    proc = subprocess.Popen(fmpirun_argv(*args), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            break
        if not data:
            break
        seen += data
    os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return out, seen.decode(), proc.wait(60)


def test_a_terminal_gets_a_live_line_that_is_wiped_before_the_output():
    out, terminal, status = _on_a_terminal("-n", "3", PY, HELLO)
    assert status == 0 and out.strip() == GREETING
    frames = terminal.split("\r\x1b[K")
    assert any(re.fullmatch(r"fmpirun: 3 ranks: \d started, \d joined, [\d.]+ s", f) for f in frames), frames
    assert any(f.startswith("fmpirun: 3 ranks: all joined in ") for f in frames), frames
    assert frames[-1] == "", frames  # the line is gone; nothing else was printed (no links line without -v)


def test_no_terminal_no_progress_and_no_links_line():
    result = subprocess.run(fmpirun_argv("-n", "3", PY, HELLO), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == GREETING
    assert result.stderr == ""


def test_verbose_lines_are_readable_and_name_each_link_once():
    result = subprocess.run(fmpirun_argv("-n", "3", "-v", PY, HELLO), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("fmpirun: ") for line in lines), lines
    assert not any("{" in line or "incarnation" in line for line in lines), lines  # no raw event dicts
    joins = [re.fullmatch(r"fmpirun: rank (\d) joined \((\d) of 3\)", line) for line in lines if " joined (" in line]
    assert sorted(int(m.group(1)) for m in joins) == [0, 1, 2] and [m.group(2) for m in joins] == ["1", "2", "3"], lines
    assert any(line.startswith("fmpirun: all 3 ranks joined; the world formed in ") for line in lines), lines
    links = [re.match(r"fmpirun: link (\d-\d): ", line).group(1) for line in lines if line.startswith("fmpirun: link ")]
    assert sorted(links) == ["0-1", "0-2", "1-2"], lines  # each pair once, as it formed or at the end
    assert sorted(line for line in lines if " finished" in line) == [f"fmpirun: rank {r} finished" for r in range(3)]
    assert lines[-1].startswith("fmpirun: links: 3 ("), lines

