"""Ranges of ranks and of indices: rank lists in messages ([0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8', so a 1000-rank
failure message stays readable) and a count split into nearly equal pieces."""

from __future__ import annotations

from typing import Iterable


def describe_ranks(ranks: Iterable[int]) -> str:
    parts: list[str] = []
    start = prev = None
    for r in [*sorted(ranks), None]:
        if r is not None and prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = r
    return ", ".join(parts) if parts else "none"


def ranks_phrase(ranks: Iterable[int]) -> str:
    """'rank 3' or 'ranks 1, 4-6': the subject of a sentence about them."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {describe_ranks(ranks)}"


def split_even(count: int, parts: int) -> list[tuple[int, int]]:
    """(start, stop) of `parts` nearly equal pieces of range(count) (the first ones one longer)."""
    base, extra = divmod(count, parts)
    out, pos = [], 0
    for i in range(parts):
        n = base + (i < extra)
        out.append((pos, pos + n))
        pos += n
    return out
