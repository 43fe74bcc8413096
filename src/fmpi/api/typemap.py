"""Where a datatype's bytes lie, and moving them between a user's buffer and one packed stream.

A layout is a tuple of *pieces*. A piece is a strided block of bytes: ``shape``
and ``strides`` as numpy has them (in bytes; the last axis a contiguous run) at
``offset`` from the element's origin in the user's buffer, and the same shape
at ``packed`` in the packed stream with ``packed_strides``. A constructor's
repetition (a vector's blocks, a subarray's rows, ``count`` elements of a
message) becomes one more axis of the pieces, never more pieces, so packing or
unpacking any message is one numpy strided copy per piece: a vector, a
subarray or a struct's field costs one ``np.copyto`` whatever the count.
Pieces that line up (adjacent runs, a block that continues another's axis)
are merged as they are built; ``plan`` turns a stretch of equal pieces into one
strided piece when they are evenly spaced (an indexed type's regular blocks), or
into one ``Runs`` when they are not: one numpy gather (fancy indexing) instead
of a copy per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np


@dataclass(frozen=True, slots=True)
class Piece:
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    packed: int
    packed_strides: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape)

    def moved(self, by: int, packed_by: int) -> Piece:
        return Piece(self.offset + by, self.shape, self.strides, self.packed + packed_by, self.packed_strides)


Pieces = tuple[Piece, ...]


def run(nbytes: int) -> Pieces:
    """The layout of a predefined type: one contiguous run."""
    return (Piece(0, (nbytes,), (1,), 0, (1,)),) if nbytes else ()


def repeat(pieces: Pieces, count: int, step: int, size: int) -> Pieces:
    """`count` copies of an element of `size` data bytes, `step` bytes apart in the buffer, packed one after another."""
    if count == 0 or not pieces:
        return ()
    if count == 1:
        return pieces
    return merge(
        Piece(p.offset, (count, *p.shape), (step, *p.strides), p.packed, (size, *p.packed_strides)) for p in pieces
    )


def place(parts: list[tuple[Pieces, int, int]]) -> Pieces:
    """Layouts side by side: (pieces, displacement in bytes, data bytes), packed in the order given."""
    out: list[Piece] = []
    packed = 0
    for pieces, disp, size in parts:
        out.extend(p.moved(disp, packed) for p in pieces)
        packed += size
    return merge(out)


def merge(pieces) -> Pieces:
    """Pieces in canonical form: no length-1 axes, axes folded where contiguous, neighbours joined."""
    out: list[Piece] = []
    for piece in pieces:
        piece = _fold(piece)
        if piece.nbytes == 0:
            continue
        if out and (joined := _join(out[-1], piece)) is not None:
            out[-1] = joined
            while len(out) >= 2 and (joined := _join(out[-2], out[-1])) is not None:
                out[-2:] = [joined]
        else:
            out.append(piece)
    return tuple(out)


def _fold(p: Piece) -> Piece:
    """Drop length-1 axes; fold an axis into the one inside it where both streams are contiguous across them."""
    axes = [(n, s, ps) for n, s, ps in zip(p.shape, p.strides, p.packed_strides) if n != 1]
    if not axes or axes[-1][1:] != (1, 1):
        axes.append((1, 1, 1))  # the innermost axis is always a contiguous run (of one byte here)
    folded = [axes[-1]]
    for n, s, ps in reversed(axes[:-1]):
        inner_n, inner_s, inner_ps = folded[0]
        if s == inner_n * inner_s and ps == inner_n * inner_ps:
            folded[0] = (n * inner_n, inner_s, inner_ps)
        else:
            folded.insert(0, (n, s, ps))
    shape, strides, pstrides = zip(*folded)
    return Piece(p.offset, shape, strides, p.packed, pstrides)


def _join(a: Piece, b: Piece) -> Piece | None:
    """One piece covering `a` then `b` (b's bytes packed right after a's), or None."""
    if b.packed != a.packed + a.nbytes:
        return None
    if len(b.shape) == len(a.shape) - 1:  # b may be one more step along a's outermost axis
        b = Piece(b.offset, (1, *b.shape), (a.strides[0], *b.strides), b.packed, (a.packed_strides[0], *b.packed_strides))
    same_axes = a.strides == b.strides and a.packed_strides == b.packed_strides
    if same_axes and len(a.shape) == len(b.shape) and a.shape[1:] == b.shape[1:]:
        n, step, packed_step = a.shape[0], a.strides[0], a.packed_strides[0]
        if b.offset == a.offset + n * step and b.packed == a.packed + n * packed_step:
            return _fold(Piece(a.offset, (n + b.shape[0], *a.shape[1:]), a.strides, a.packed, a.packed_strides))
    return None


# ------------------------------------------------------------------ copying
@dataclass(frozen=True, slots=True)
class Runs:
    """k equal pieces at scattered offsets, evenly spaced when packed: moved by one fancy-indexed copy."""

    index: np.ndarray  # (k, *outer shape): the byte offset of every run, relative to the element's origin
    length: int  # bytes in one run
    packed: int
    packed_strides: tuple[int, ...]  # between the k pieces, then of the outer axes


Plan = tuple[Piece | Runs, ...]
MIN_RUNS = 8  # fewer scattered pieces are copied one by one (a fancy index costs more than a few copies)


def plan(pieces: Pieces) -> Plan:
    """How to move `pieces`: each stretch of equal, evenly packed pieces becomes one strided piece (evenly
    spaced in the buffer too) or one ``Runs`` (scattered); the rest are copied one by one."""
    out: list[Piece | Runs] = []
    i = 0
    while i < len(pieces):
        first, j = pieces[i], i + 1
        spacing = pieces[j].packed - first.packed if j < len(pieces) else 0
        while j < len(pieces) and _same_kind(first, pieces[j]) and pieces[j].packed == first.packed + (j - i) * spacing:
            j += 1
        group = pieces[i:j]
        steps = {b.offset - a.offset for a, b in zip(group, group[1:])}
        if len(group) > 1 and len(steps) == 1:
            axis = (len(group), *first.shape)
            out.append(_fold(Piece(first.offset, axis, (steps.pop(), *first.strides), first.packed, (spacing, *first.packed_strides))))
        elif len(group) >= MIN_RUNS:
            out.append(_runs(group, spacing))
        else:
            out.extend(group)
        i = j
    return tuple(out)


def _same_kind(a: Piece, b: Piece) -> bool:
    return a.shape == b.shape and a.strides == b.strides and a.packed_strides == b.packed_strides


def _runs(group: Pieces, spacing: int) -> Runs:
    first = group[0]
    index = np.array([p.offset for p in group], np.int64)
    for n, stride in zip(first.shape[:-1], first.strides[:-1]):
        index = index[..., None] + np.arange(n, dtype=np.int64) * stride
    return Runs(index, first.shape[-1], first.packed, (spacing, *first.packed_strides[:-1]))


def _word(run: int) -> int:
    """The widest unsigned integer (8, 4, 2 or 1 bytes) a run is made of: numpy copies those fastest."""
    return 8 if run % 8 == 0 else 4 if run % 4 == 0 else 2 if run % 2 == 0 else 1


def _words(buffer: memoryview, offset: int, outer: tuple[int, ...], strides: tuple[int, ...], run: int) -> np.ndarray:
    """Runs of `run` bytes at `offset` + the outer axes' strides, as an array of words (numpy checks its bounds)."""
    word = _word(run)
    if run == word:  # one word per run: a plain strided array
        return np.ndarray(outer, _WORDS[word], buffer, offset, strides)
    return np.ndarray((*outer, run // word), _WORDS[word], buffer, offset, (*strides, word))


_WORDS = {n: np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


def _array(buffer: memoryview, offset: int, piece: Piece, strides: tuple[int, ...]) -> np.ndarray:
    return _words(buffer, offset, piece.shape[:-1], strides[:-1], piece.shape[-1])


def _windows(buffer: memoryview, run: int) -> np.ndarray:
    """Every `run`-byte window of `buffer`, window k starting at byte k (for gathering scattered runs)."""
    return _words(buffer, 0, (len(buffer) - run + 1,), (1,), run)


def _packed_runs(buffer: memoryview, runs: Runs) -> np.ndarray:
    return _words(buffer, runs.packed, runs.index.shape, runs.packed_strides, runs.length)


def pack(steps: Plan, source: memoryview, base: int, dest: memoryview) -> None:
    """Copy the bytes `steps` describe, at `base` in `source`, into `dest` (packed order)."""
    for p in steps:
        if type(p) is Runs:
            _packed_runs(dest, p)[...] = _windows(source, p.length)[p.index + base]
        elif len(p.shape) == 1:
            dest[p.packed : p.packed + p.shape[0]] = source[base + p.offset : base + p.offset + p.shape[0]]
        else:
            np.copyto(_array(dest, p.packed, p, p.packed_strides), _array(source, base + p.offset, p, p.strides))


def unpack(steps: Plan, packed: memoryview, dest: memoryview, base: int) -> None:
    """The reverse of ``pack``: the packed bytes back to where `steps` say, at `base` in `dest`."""
    for p in steps:
        if type(p) is Runs:
            _windows(dest, p.length)[p.index + base] = _packed_runs(packed, p)
        elif len(p.shape) == 1:
            dest[base + p.offset : base + p.offset + p.shape[0]] = packed[p.packed : p.packed + p.shape[0]]
        else:
            np.copyto(_array(dest, base + p.offset, p, p.strides), _array(packed, p.packed, p, p.packed_strides))
