"""Errors that the CLI turns into one `npucc: error: ...` line."""


class NpuccError(Exception):
    """Bad input (model, target, stream, options): exit code 2."""

    exit_code = 2


class CheckFailed(Exception):
    """A check ran and found the program wrong: exit code 1."""

    exit_code = 1


class InternalError(Exception):
    """A compiler bug (a broken internal contract, e.g. a pass given the wrong IR type)."""
