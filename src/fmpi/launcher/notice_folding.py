"""Folding of the notices many ranks print alike.

When a job fails early, every rank that was still starting says the same thing ("fmpi: rank 170: cannot
join the job: no job ... on this relay"): 256 ranks made 90 such lines after the one line that named the
cause. fmpirun prints the first of each kind, counts the rest, and ends its output with one line per kind
that says how many ranks said it too, and which.
"""

from __future__ import annotations

import re

from ..util.ranges import describe_ranks

_NOTICE = re.compile(rb"^fmpi: rank (\d+): (.*)$")


class NoticeFolder:
    """Lets the first "fmpi: rank N: TEXT" of each TEXT through and counts the same TEXT from other ranks
    (a rank that says the same thing twice is telling of two events: both are printed)."""

    def __init__(self) -> None:
        self._said: dict[bytes, set[int]] = {}  # TEXT -> the ranks that said it
        self._folded: dict[bytes, list[int]] = {}  # TEXT -> the ranks whose line was held back

    def filter(self, lines: bytes) -> bytes:
        """The lines to print now (complete lines in, complete lines out)."""
        kept = []
        for line in lines.splitlines(keepends=True):
            found = _NOTICE.match(line.rstrip(b"\r\n"))
            if found is None:
                kept.append(line)
                continue
            rank, text = int(found.group(1)), found.group(2)
            said = self._said.setdefault(text, set())
            if said and rank not in said:
                self._folded.setdefault(text, []).append(rank)
            else:
                kept.append(line)
            said.add(rank)
        return b"".join(kept)

    def summary(self) -> bytes:
        """One line per notice that other ranks repeated."""
        out = []
        for text, ranks in self._folded.items():
            said = text.decode("utf-8", "replace")
            if len(said) > 60:
                said = said[:57] + "..."
            out.append(f"fmpirun: {len(ranks)} more ranks said the same ({said!r}): ranks "
                       f"{describe_ranks(sorted(ranks))}\n")
        return "".join(out).encode()
