"""dask-mpi: rank 0 runs the scheduler, rank 1 this script as the client, the others are workers (dask-mpi's docs)."""

from dask_mpi import initialize


def main() -> None:
    initialize(nthreads=1, dashboard=False)
    from distributed import Client

    with Client() as client:
        futures = client.map(lambda x: x + 100, range(10))
        print("total", client.submit(sum, futures).result())


if __name__ == "__main__":
    main()
