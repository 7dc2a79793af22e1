"""The one exception type for user errors (bad input, bad options): exit code 2, one line."""

from __future__ import annotations


class ProfilerError(Exception):
    """A user-facing error. Its message is one line that names the offending input."""
