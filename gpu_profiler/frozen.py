"""`frozen`: the project's frozen dataclass, its ``__eq__``, ``__hash__``, ``__repr__``,
``__setattr__`` and ``__delattr__`` made without compiling code (functions shared by every
class, or a closure), where a frozen dataclass compiles each for each class.

Python 3.11 compiles six methods for each frozen dataclass, ~1 ms a class: ~40 ms of a
small scan's start-up, which imports ~40 (bench/results/startup.md). Five of them are
made here, with the dataclass semantics: equal when of the same class with equal
``compare`` fields, hashed by those (or as ``hash`` says), shown by the ``repr`` fields,
and no attribute set or deleted once ``__init__`` has set each field (once). Only
``__init__`` is compiled, as for a plain dataclass: its assignments pass that
``__setattr__``, ~0.2 us a field (a scan of 4,000 shards sets ~9,000), so every field must
be one ``__init__`` sets.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, field, fields
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


def _setattr(names: frozenset[str]) -> Callable[[Any, str, Any], None]:
    """A class's ``__setattr__``: a closure, where a dataclass compiles one (~0.14 ms)."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in self.__dict__ or name not in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)  # (a field, by __init__)
    return __setattr__


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, eq: bool = True) -> Any: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: Any = None, /, *, eq: bool = True) -> Any:
    """``@dataclass(frozen=True)`` (``eq=False``: compared and hashed by identity), its
    class's own ``__eq__``, ``__hash__`` and ``__repr__`` kept. Unlike the standard
    decorator's: a field must be one ``__init__`` sets, the class may not define its own
    ``__setattr__`` or ``__delattr__`` (both refused, TypeError), ``__init__`` runs once,
    a subclass sets no attribute of its own (decorate it ``@frozen`` too), and no
    standard frozen dataclass derives from one, nor it from one."""
    def make(c: Any) -> Any:
        own = dict(c.__dict__)  # (before the dataclass adds to it)
        c = dataclass(eq=False, repr=False)(c)
        every = fields(c)
        if not all(f.init for f in every) or {"__setattr__", "__delattr__"} & own.keys():
            raise TypeError(f"{c.__qualname__}: a frozen class's __init__ sets every field, "
                            "and nothing else does (init=False, or a __setattr__ or "
                            "__delattr__ of its own, needs @dataclass(frozen=True))")
        c.__setattr__ = _setattr(frozenset(f.name for f in every))
        c.__delattr__ = _delattr
        if "__repr__" not in own:
            c.__repr__ = _repr
        if eq and "__eq__" not in own:
            c.__eq__ = _eq
        if eq and ("__hash__" not in own or own["__hash__"] is None and "__eq__" in own):
            c.__hash__ = _hash  # (None beside its own __eq__: Python's, not the class's)
        return c
    return make if cls is None else make(cls)
