"""The one error of a bad command line: fmpirun prints its message and exits with status 2."""


class UsageError(Exception):
    """Bad command line: one message, exit status 2."""
