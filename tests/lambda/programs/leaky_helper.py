COUNT = 0


def bump() -> int:
    global COUNT
    COUNT += 1
    return COUNT
