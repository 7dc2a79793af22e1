"""The one exception type for user errors (bad input, bad options): exit code 2, one line;
and which errors a shard's reading may raise."""

from __future__ import annotations

import sys


class ProfilerError(Exception):
    """A user-facing error. Its message is one line that names the offending input."""


def shard_error(exc: BaseException) -> bool:
    """Whether reading a shard raised ``exc`` because of the shard (a sharded scan may skip
    it): a `ProfilerError`, an `OSError`, or an error of pyarrow's (only once a reader has
    loaded pyarrow: a scan of Megatron-LM indexes never does)."""
    pa = sys.modules.get("pyarrow")
    return isinstance(exc, (ProfilerError, OSError)) or (
        pa is not None and isinstance(exc, pa.ArrowException))


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
