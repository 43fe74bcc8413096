"""Rank arithmetic shared by the tree and recursive-doubling algorithms."""

from __future__ import annotations


def subtree(rel: int, size: int) -> int:
    """How many ranks the binomial subtree of relative rank `rel` spans (rel 0: all)."""
    span = size if rel == 0 else rel & -rel
    return min(span, size - rel)


def fold(rank: int, size: int) -> tuple[int, int, int]:
    """Recursive doubling on any N (MPICH's fold-in of the ranks beyond a power of two).

    Returns (pof2, rem, newrank): the first 2*rem ranks pair up, the even one
    of each pair hands its data to the odd one and sits out (newrank -1); the
    pof2 remaining ranks run the power-of-two algorithm. New ranks keep the
    order of the old ones, so rank order is preserved for non-commutative ops.
    """
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank < 2 * rem:
        newrank = -1 if rank % 2 == 0 else rank // 2
    else:
        newrank = rank - rem
    return pof2, rem, newrank


def real_rank(newrank: int, rem: int) -> int:
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def real_span(new_lo: int, new_hi: int, rem: int) -> tuple[int, int]:
    """Old ranks [lo, hi) whose data new ranks [new_lo, new_hi) hold after the fold-in."""
    lo = 2 * new_lo if new_lo < rem else new_lo + rem
    last = new_hi - 1
    hi = 2 * last + 2 if last < rem else last + rem + 1
    return lo, hi
