"""The attributes every communicator has (``comm.Get_attr``), with the values MPICH gives them."""

from __future__ import annotations

from .. import settings
from . import constants as c
from .exceptions import last_used_code


def predefined_attribute(keyval: int) -> int | None:
    """The value of a predefined attribute; None for any other keyval (as for an attribute not set)."""
    # UNIVERSE_SIZE: unset (None) unless given (FMPI_UNIVERSE_SIZE), as under MPICH's mpiexec.
    values = {c.TAG_UB: c.TAG_UB, c.APPNUM: 0, c.UNIVERSE_SIZE: settings.current().universe_size,
              c.WTIME_IS_GLOBAL: 0, c.IO: c.ANY_SOURCE, c.LASTUSEDCODE: last_used_code()}
    return values.get(keyval)
