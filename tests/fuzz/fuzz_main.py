"""Coverage-guided fuzzing of one target with atheris: python fuzz_main.py TARGET [libFuzzer flags].

    python tests/fuzz/fuzz_main.py relay_frame -max_total_time=60
"""

import sys

import atheris

with atheris.instrument_imports():
    import fuzz_targets


def main() -> None:
    target = fuzz_targets.TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], lambda data: target(bytes(data)))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
