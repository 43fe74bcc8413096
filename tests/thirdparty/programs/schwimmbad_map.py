"""schwimmbad's MPIPool: the master maps a function over the workers (the example of its README).

    python schwimmbad_map.py [--dill] [--close-once]

The workers never return from MPIPool(): they serve tasks until the master closes the pool, then exit.
As its docs show, the pool is a context manager, and schwimmbad also closes it at exit (atexit): the master
sends every worker a second stop message after the worker has left. fmpi drops it; MPICH (4.3 and 5.0) now
and then kills the worker for it (hydra "EXIT CODE: 9", 10 runs in 24 here, never with one close).
`--close-once` leaves the closing to atexit alone: the form the MPICH reference runs.
"""

import sys

from schwimmbad import MPIPool


def work(x):
    return x * x + 1


def run(pool: MPIPool) -> None:
    print("results", list(pool.map(work, range(20))))
    print("lambda", list(pool.map(lambda v: v - 1, range(5))) if "--dill" in sys.argv else "skipped")


def main() -> None:
    if "--close-once" in sys.argv:
        run(MPIPool(use_dill="--dill" in sys.argv))
        return
    with MPIPool(use_dill="--dill" in sys.argv) as pool:
        if not pool.is_master():
            pool.wait()
            return
        run(pool)


if __name__ == "__main__":
    main()
