"""mpipool's MPIExecutor (dill serialization through MPI.pickle): the main rank submits, the others work."""

from mpipool import MPIExecutor


def main() -> None:
    with MPIExecutor() as pool:
        pool.workers_exit()
        squares = list(pool.map(lambda x: x * x, range(12)))  # a lambda: only dill pickles it
        future = pool.submit(sum, squares)
        print("squares", squares, "sum", future.result())


if __name__ == "__main__":
    main()
