"""The same notice from many ranks is printed once, then summarized with a count and the ranks (issue 29 item 4:
a failed 256-rank start printed ~90 near-identical "cannot join the job" lines after the one naming the cause)."""

from __future__ import annotations

import re

from fmpi.launcher.notice_folding import NoticeFolder


def test_the_first_notice_of_a_kind_passes_and_repeats_are_counted():
    folder = NoticeFolder()
    assert folder.filter(b"fmpi: rank 3: cannot join the job: gone\n") == b"fmpi: rank 3: cannot join the job: gone\n"
    assert folder.filter(b"fmpi: rank 4: cannot join the job: gone\nplain output\n") == b"plain output\n"
    assert folder.filter(b"fmpi: rank 5: cannot join the job: gone\n") == b""
    assert folder.filter(b"fmpi: rank 5: another thing\n") == b"fmpi: rank 5: another thing\n"
    # the same rank saying it again tells of another event: printed
    assert folder.filter(b"fmpi: rank 3: cannot join the job: gone\n") == b"fmpi: rank 3: cannot join the job: gone\n"
    assert folder.summary() == b"fmpirun: 2 more ranks said the same ('cannot join the job: gone'): ranks 4-5\n"


def test_fmpirun_folds_a_notice_every_rank_prints(program, fmpi):
    run = fmpi(6, program("""
        import sys
        from mpi4py import MPI
        print(f"fmpi: rank {MPI.COMM_WORLD.rank}: cannot join the job: the same reason", file=sys.stderr)
        print("out", MPI.COMM_WORLD.rank)
    """))
    assert run.returncode == 0, run.stderr
    assert len(run.lines()) == 6
    notices = [line for line in run.stderr.splitlines() if "the same reason" in line]
    assert len(notices) == 2, run.stderr  # the first rank's, and the summary
    assert re.fullmatch(r"fmpi: rank \d: cannot join the job: the same reason", notices[0])
    assert notices[1].startswith("fmpirun: 5 more ranks said the same ('cannot join the job: the same reason'): ranks ")
