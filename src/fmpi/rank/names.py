"""A rank's name service (MPI name publishing): the one its job's relay keeps, for this rank's job.

``api/names.py`` calls this; the service itself is the rendezvous backend's
(``rendezvous.names``), held by the relay URL the job uses, as ports meet there.
"""

from __future__ import annotations

from typing import Any

from .. import rendezvous
from .spec import RankSpec


def name_service(spec: RankSpec) -> Any:
    """The ``NameService`` of `spec`'s relay, acting for `spec`'s job (a name it publishes ends with the job)."""
    return rendezvous.names(spec.relay, spec.job, spec.token)
