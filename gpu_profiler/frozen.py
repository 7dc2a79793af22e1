"""`frozen`: the project's frozen dataclass, with ``__eq__``, ``__hash__`` and ``__repr__``
shared by every class instead of compiled for each.

Python 3.11 compiles six methods for each frozen dataclass, ~1 ms a class: ~40 ms of a
small scan's start-up, which imports ~40 (bench/results/startup.md). Three of them are
shared here, with the dataclass semantics: equal when of the same class with equal
``compare`` fields, hashed by those (or as ``hash`` says), shown by the ``repr`` fields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, overload

T = TypeVar("T")

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # (Python 3.10: only type checkers read it)
    def dataclass_transform(**_: Any) -> Callable[[T], T]:
        return lambda f: f


def _compared(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in fields(self) if f.compare)


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is self.__class__:
        return _compared(self) == _compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, f.name) for f in fields(self)
                      if (f.compare if f.hash is None else f.hash)))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{type(self).__qualname__}({shown})"


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, eq: bool = True) -> Any: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: Any = None, /, *, eq: bool = True) -> Any:
    """``@dataclass(frozen=True)`` (``eq=False``: compared and hashed by identity), its
    class's own ``__eq__``, ``__hash__`` and ``__repr__`` kept."""
    def make(c: Any) -> Any:
        own = dict(c.__dict__)  # (before the dataclass adds to it)
        c = dataclass(frozen=True, eq=False, repr=False)(c)
        if "__repr__" not in own:
            c.__repr__ = _repr
        if eq and "__eq__" not in own:
            c.__eq__ = _eq
        if eq and ("__hash__" not in own or own["__hash__"] is None and "__eq__" in own):
            c.__hash__ = _hash  # (None beside its own __eq__: Python's, not the class's)
        return c
    return make if cls is None else make(cls)
