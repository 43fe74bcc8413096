"""Differential: Publish_name, Lookup_name, Unpublish_name and their error classes, then a server/client meeting.

Rank 0 tries the errors (an unknown name, a name published twice, one withdrawn twice); every rank
publishes a name of its own and looks up the others'; then rank 0 publishes a service and accepts,
rank 1 looks it up and connects, and they exchange a message. Every process writes its lines to
argv[1]/rank<r>.txt.
"""

import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def attempt(label, call):
    try:
        result = call()
        print(label, rank, "ok", result, file=out)
    except MPI.Exception as exc:
        cls = exc.Get_error_class()
        what = {MPI.ERR_NAME: "ERR_NAME", MPI.ERR_SERVICE: "ERR_SERVICE"}.get(cls, cls)
        print(label, rank, "error", what, file=out)


# 1. the errors, and one name published by rank 0 that every rank finds
port = MPI.Open_port() if rank == 0 else None
if rank == 0:
    attempt("lookup unknown", lambda: MPI.Lookup_name("fmpi-test-unknown"))
    attempt("unpublish unknown", lambda: MPI.Unpublish_name("fmpi-test-unknown", port))
    attempt("publish", lambda: MPI.Publish_name("fmpi-test-svc", port))
    attempt("publish again", lambda: MPI.Publish_name("fmpi-test-svc", port, MPI.INFO_NULL))
port = world.bcast(port, 0)
world.Barrier()
attempt("lookup", lambda: MPI.Lookup_name("fmpi-test-svc") == port)
info = MPI.Info.Create()
info.Set("fmpi-test", "ignored")
attempt("lookup with info", lambda: MPI.Lookup_name("fmpi-test-svc", info) == port)
info.Free()
world.Barrier()
if rank == 0:
    attempt("unpublish", lambda: MPI.Unpublish_name("fmpi-test-svc", port))
    attempt("unpublish again", lambda: MPI.Unpublish_name("fmpi-test-svc", port))
    attempt("lookup withdrawn", lambda: MPI.Lookup_name("fmpi-test-svc"))
    MPI.Close_port(port)
world.Barrier()

# 2. a name per rank, found by every other rank
mine = MPI.Open_port()
MPI.Publish_name(f"fmpi-test-rank-{rank}", mine)
ports = world.allgather(mine)
world.Barrier()
found = [MPI.Lookup_name(f"fmpi-test-rank-{r}") == ports[r] for r in range(size)]
print("found all", rank, all(found), len(found), file=out)
world.Barrier()
MPI.Unpublish_name(f"fmpi-test-rank-{rank}", mine, MPI.INFO_NULL)
MPI.Close_port(mine)
world.Barrier()

# 3. the classic server/client: rank 0 publishes and accepts, rank 1 looks the service up and connects
if rank == 0:
    port = MPI.Open_port()
    MPI.Publish_name("fmpi-test-dpm", port)
world.Barrier()
if rank == 0:
    client = MPI.COMM_SELF.Accept(port)
    client.send({"hello": "from the server"}, 0)
    print("server got", rank, client.recv(source=0), file=out)
    client.Disconnect()
    MPI.Unpublish_name("fmpi-test-dpm", port)
    MPI.Close_port(port)
elif rank == 1:
    server = MPI.COMM_SELF.Connect(MPI.Lookup_name("fmpi-test-dpm"))
    print("client got", rank, server.recv(source=0), file=out)
    server.send("thanks", 0)
    server.Disconnect()
world.Barrier()
print("done", rank, file=out)
out.close()
