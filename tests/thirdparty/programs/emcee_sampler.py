"""emcee's EnsembleSampler with a schwimmbad MPIPool evaluating the log-probability (emcee's MPI tutorial).

    python emcee_sampler.py [--close-once]

`--close-once`: the pool is closed by schwimmbad's atexit handler alone (see schwimmbad_map.py: the form the
MPICH reference runs, which now and then kills a worker sent a second stop message).
"""

import hashlib
import sys

import emcee
import numpy as np
from schwimmbad import MPIPool


def log_prob(theta):
    return -0.5 * np.sum(theta**2)


def run(pool: MPIPool) -> None:
    rng = np.random.default_rng(42)
    nwalkers, ndim = 16, 3
    p0 = rng.standard_normal((nwalkers, ndim))
    np.random.seed(7)  # emcee draws its moves from numpy's global generator
    sampler = emcee.EnsembleSampler(nwalkers, ndim, log_prob, pool=pool)
    sampler.run_mcmc(p0, 50, progress=False)
    chain = sampler.get_chain()
    print("chain", chain.shape, hashlib.sha256(chain.tobytes()).hexdigest()[:16])


def main() -> None:
    if "--close-once" in sys.argv:
        run(MPIPool())
        return
    with MPIPool() as pool:
        if not pool.is_master():
            pool.wait()
            return
        run(pool)


if __name__ == "__main__":
    main()
