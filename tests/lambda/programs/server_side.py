"""Server-side collectives of a relayed job (--channel relay): Allreduce and Barrier on the relays' shared objects.

Prints ``OK <rank>`` when every result is right, ``SERVER <rank> <json>``
(this rank's completed server-side calls) and, with fmpi-relay, ``NODES
<rank> <json>``: the relays this rank's objects lived on.
"""

import json

import numpy as np
from mpi4py import MPI

from fmpi.api import runtime

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
ok = True
comms = [comm] + [comm.Dup() for _ in range(5)]
for i, c in enumerate(comms):
    for count in (1, 1000, 300_001):
        x = np.full(count, rank + i, "i8")
        out = np.empty_like(x)
        c.Allreduce(x, out, MPI.SUM)
        ok &= bool(np.all(out == sum(r + i for r in range(size))))
    c.Barrier()
print(f"OK {rank}" if ok else f"WRONG {rank}", flush=True)
print(f"SERVER {rank} {json.dumps(runtime.server_collective_calls(), sort_keys=True)}", flush=True)
server = runtime.state.server
if server is not None and server.kind == "dso":
    print(f"NODES {rank} {json.dumps(sorted(server.client._nodes))}", flush=True)
