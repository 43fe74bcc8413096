"""The job a stranger with the Redis URL attacks (test_redis_strangers.py): relayed traffic with a known marker.

Every round, rank 0 sends each other rank a buffer and a pickled object that
both contain MARKER; each rank answers with a digest of what it got, and
writes one line per round to OUT/rank<r>.txt, so the results are exact and
known in advance. The rounds are paced (ROUNDS x PAUSE s) so that the attack
happens while the job runs.
"""

import hashlib
import os
import sys
import time

import numpy as np

MARKER = b"FMPI-PLAINTEXT-MARKER-7f3a"
ROUNDS, PAUSE = 40, 0.1


def payload(round_: int, dest: int) -> np.ndarray:
    text = MARKER + f" round {round_} to {dest} ".encode()
    return np.frombuffer(text * (40_000 // len(text)), dtype=np.uint8).copy()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def main() -> None:
    from mpi4py import MPI  # (here: the test imports this file for its payloads, outside any job)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    out = sys.argv[1]
    lines = []
    for i in range(ROUNDS):
        if rank == 0:
            for dest in range(1, size):
                comm.Send(payload(i, dest), dest=dest, tag=i)
                comm.send({"round": i, "note": MARKER.decode()}, dest=dest, tag=10_000 + i)
            for dest in range(1, size):
                lines.append(f"round {i} from {dest} {comm.recv(source=dest, tag=20_000 + i)}")
        else:
            buf = np.empty_like(payload(i, rank))
            comm.Recv(buf, source=0, tag=i)
            note = comm.recv(source=0, tag=10_000 + i)
            answer = digest(buf.tobytes() + note["note"].encode())
            comm.send(answer, dest=0, tag=20_000 + i)
            lines.append(f"round {i} got {answer}")
        time.sleep(PAUSE)
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
