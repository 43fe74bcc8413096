"""zeus's ChainManager: several chains, each sampled by its own group of ranks with a pool of them (zeus's MPI docs).

zeus's draws differ from run to run under mpiexec too, so each chain prints its shape and whether it sampled
the standard normal it targets.
"""

import numpy as np
import zeus
from zeus import ChainManager


def log_prob(theta):
    return -0.5 * np.sum(theta**2)


def main() -> None:
    nchains = 2
    with ChainManager(nchains) as cm:
        rank = cm.get_rank
        np.random.seed(11 + rank)
        nwalkers, ndim = 8, 2
        start = np.random.randn(nwalkers, ndim)
        sampler = zeus.EnsembleSampler(nwalkers, ndim, log_prob, pool=cm.get_pool, verbose=False)
        sampler.run_mcmc(start, 30, progress=False)
        chain = sampler.get_chain()
        if cm.get_pool.is_master():
            sampled = abs(chain.mean()) < 1 and 0.2 < chain.std() < 3
            print("chain", rank, chain.shape, "sampled" if sampled else f"off: {chain.mean()} {chain.std()}")


if __name__ == "__main__":
    main()
