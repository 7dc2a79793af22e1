"""The one exception type for user errors (bad input, bad options): exit code 2, one line."""

from __future__ import annotations


class ProfilerError(Exception):
    """A user-facing error. Its message is one line that names the offending input."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
