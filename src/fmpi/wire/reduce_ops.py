"""The reductions a server may fold, by the names both ends use on the wire, and the numpy ufunc of each.

fmpi-relay's reducer objects and the Redis collectives fold contributions
with the same ufuncs, so a name means the same arithmetic everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# op name -> the numpy ufunc that folds it
OPS: dict[str, str] = {
    "sum": "add",
    "prod": "multiply",
    "max": "maximum",
    "min": "minimum",
    "band": "bitwise_and",
    "bor": "bitwise_or",
    "bxor": "bitwise_xor",
    "land": "logical_and",
    "lor": "logical_or",
    "lxor": "logical_xor",
}


def ufunc(op: str) -> np.ufunc:
    """The numpy ufunc of a reduction op named in ``OPS``."""
    import numpy as np  # (here, not at import: fmpirun embeds the relay and may never reduce)

    return getattr(np, OPS[op])
