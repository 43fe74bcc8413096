"""Programs for the fault tests; the first argument picks the role of this rank.

    python faults.py stop-self          rank stops itself (SIGSTOP) after joining: it never answers
    python faults.py die                rank exits at once after joining, without finalizing
    python faults.py send-to R          send to rank R; print the outcome ("error: ..." or "sent")
    python faults.py send-forever R     say "sending", then send to rank R (the test pulls the relay meanwhile)
    python faults.py pair R             exchange one message with rank R
    (send-to R S: after the send, whatever its outcome, exchange one message with rank S)
"""

import os
import signal
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
what = sys.argv[1]
print(f"rank {comm.rank} joined", flush=True)
if what == "stop-self":
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(60)
elif what == "die":
    os._exit(5)
elif what == "pair":
    other = int(sys.argv[2])
    assert comm.sendrecv(comm.rank, dest=other, source=other) == other
    print("pair ok", flush=True)
elif what in ("send-to", "send-forever"):
    dest = int(sys.argv[2])
    time.sleep(0.5)
    print("sending", flush=True)
    start = time.monotonic()
    try:
        comm.send("hello", dest=dest, tag=1)
        print(f"sent after {time.monotonic() - start:.1f}s", flush=True)
    except MPI.Exception as exc:
        print(f"error after {time.monotonic() - start:.1f}s: {exc.Get_error_string()}", flush=True)
        if len(sys.argv) <= 3:
            os._exit(3)
    if len(sys.argv) > 3:  # then talk to another rank: the job still works
        other = int(sys.argv[3])
        assert comm.sendrecv(comm.rank, dest=other, source=other) == other
        print("pair ok", flush=True)
