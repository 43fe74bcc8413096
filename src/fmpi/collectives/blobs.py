"""Several ranks' byte blobs in one message, for collectives of pickled objects.

Object collectives do not know in advance how long each rank's pickle is, so
a message that carries the blobs of several ranks starts with their lengths:
``u32 count, count x u64 length`` and then the blobs back to back. A blob is
a list of views (a pickle's parts are sent as they are, never joined).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_COUNT = struct.Struct("<I")
_LEN = struct.Struct("<Q")

Blob = Sequence[memoryview]


def pack(blobs: Sequence[Blob]) -> list[memoryview]:
    """Message parts carrying `blobs` in order (the blobs themselves are not copied)."""
    lengths = [sum(len(p) for p in blob) for blob in blobs]
    head = _COUNT.pack(len(blobs)) + b"".join(_LEN.pack(n) for n in lengths)
    parts = [memoryview(head)]
    for blob in blobs:
        parts.extend(p for p in blob if len(p))
    return parts


def unpack(payload: bytes | bytearray | memoryview) -> list[memoryview]:
    """The blobs of a packed message, as views into `payload`."""
    view = memoryview(payload)
    (count,) = _COUNT.unpack_from(view, 0)
    pos = _COUNT.size
    lengths = [_LEN.unpack_from(view, pos + i * _LEN.size)[0] for i in range(count)]
    pos += count * _LEN.size
    out = []
    for n in lengths:
        out.append(view[pos : pos + n])
        pos += n
    return out
