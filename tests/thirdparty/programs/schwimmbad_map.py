"""schwimmbad's MPIPool: the master maps a function over the workers (the example of its README).

    python schwimmbad_map.py [--dill]
"""

import sys

from schwimmbad import MPIPool


def work(x):
    return x * x + 1


def main() -> None:
    with MPIPool(use_dill="--dill" in sys.argv) as pool:
        if not pool.is_master():
            pool.wait()
            return
        print("results", list(pool.map(work, range(20))))
        print("lambda", list(pool.map(lambda v: v - 1, range(5))) if "--dill" in sys.argv else "skipped")


if __name__ == "__main__":
    main()
