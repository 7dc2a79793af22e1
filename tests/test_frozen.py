"""`gpu_profiler.frozen.frozen` behaves as ``@dataclass(frozen=True)``: each class beside its
twin made by the standard decorator."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import FrozenInstanceError, dataclass, field

import pytest

from gpu_profiler.frozen import frozen


def _namespace() -> dict:
    """A class body (fresh fields: a dataclass takes them over)."""
    return {"__annotations__": {"a": "int", "b": "str", "c": "list", "d": "float", "e": "int"},
            "b": "x", "c": field(default_factory=list, compare=False),
            "d": field(default=0.5, repr=False), "e": field(default=1, hash=False)}


def _pair(eq: bool = True) -> tuple[type, type]:
    return (frozen(eq=eq)(type("Pair", (), _namespace())),
            dataclass(frozen=True, eq=eq)(type("Pair", (), _namespace())))


@pytest.mark.parametrize("eq", [True, False])
def test_a_frozen_class_behaves_as_its_standard_twin(eq: bool) -> None:
    ours, std = _pair(eq)
    for cls in (ours, std):
        x, y, z = cls(1), cls(1, c=[2]), cls(2, "y")
        assert repr(x) == "Pair(a=1, b='x', c=[], e=1)"
        assert (x == y) is eq and x != z and x != cls(1, d=0.7)  # c not compared, d is
        assert x.__eq__(object()) is NotImplemented if eq else True
        assert (hash(x) == hash(cls(1)) == hash(cls(1, e=2))) is eq and x != cls(1, e=2)
        assert dataclasses.replace(x, a=3).a == 3 and dataclasses.replace(x, a=3) is not x
        assert [f.name for f in dataclasses.fields(x)] == ["a", "b", "c", "d", "e"]
        assert dataclasses.asdict(z) == {"a": 2, "b": "y", "c": [], "d": 0.5, "e": 1}
        with pytest.raises(FrozenInstanceError):
            x.a = 2  # type: ignore[misc]
        with pytest.raises(FrozenInstanceError):
            del x.a  # type: ignore[misc]
    assert ours(1) != std(1)  # another class, as two standard classes are


def test_a_class_keeps_its_own_methods_and_subclasses_compare_their_fields() -> None:
    @frozen(eq=False)
    class Own:
        a: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Own) and abs(self.a - other.a) <= 1

        def __repr__(self) -> str:
            return "own"

    assert Own(1) == Own(2) and repr(Own(1)) == "own" and Own.__hash__ is None

    @frozen
    class Unhashable:  # an explicit None, with no __eq__ of its own: kept, as dataclass does
        a: int
        __hash__ = None  # type: ignore[assignment]

    assert Unhashable(1) == Unhashable(1) and Unhashable.__hash__ is None

    @frozen
    class Base:
        a: int

    @frozen
    class Child(Base):
        b: int = 0

    assert Child(1, 2) == Child(1, 2) and Child(1, 2) != Child(1, 3) and Child(1) != Base(1)
    assert repr(Child(1, 2)) == "test_a_class_keeps_its_own_methods_and_subclasses_compare" \
        "_their_fields.<locals>.Child(a=1, b=2)"
    assert hash(Child(1, 2)) == hash(Child(1, 2)) and {Child(1), Child(1)} == {Child(1)}


def test_a_frozen_value_pickles() -> None:
    from gpu_profiler.request import Source

    s = Source("a/b", column="n")
    assert pickle.loads(pickle.dumps(s)) == s and hash(pickle.loads(pickle.dumps(s))) == hash(s)


def test_nothing_is_set_or_deleted_after_init_and_copies_keep_the_fields() -> None:
    import copy

    ours, std = _pair()
    for cls in (ours, std):
        x = cls(1, c=[2])
        for name in ("a", "zzz", "__dict__"):
            with pytest.raises(FrozenInstanceError):
                setattr(x, name, 3)
        with pytest.raises(FrozenInstanceError):
            del x.zzz  # type: ignore[attr-defined]
        y, z = copy.copy(x), copy.deepcopy(x)
        assert y == x == z and y.c is x.c and z.c is not x.c
        with pytest.raises(FrozenInstanceError):
            y.a = 2  # type: ignore[misc]
        assert x.a == 1 and not hasattr(x, "zzz")


def test_a_field_init_does_not_set_or_a_setattr_of_its_own_is_refused() -> None:
    for body in ({"__annotations__": {"a": "int"}, "a": field(init=False, default=1)},
                 {"__annotations__": {"a": "int"}, "__setattr__": lambda s, n, v: None},
                 {"__annotations__": {"a": "int"}, "__delattr__": lambda s, n: None}):
        with pytest.raises(TypeError, match="frozen class"):
            frozen(type("Bad", (), body))
