"""The package's layers, checked on its source: every module of gpu_profiler/ and kernels/
parsed with `ast`, its imports at module level and inside functions alike. Data flows one
way (readers -> engine -> backends -> analysis -> render -> cli), over io/ and kernels/:

- the kernels import nothing of the package but themselves, and nothing outside it but
  numpy, numba, llvmlite and the standard library (so they build alone, natively);
- the histogram, cache, sampler and analyses import nothing of render/, and io/ nothing
  above it but `errors`, `frozen`, `native` and the kernels (everything writes through
  io/);
- no module imports a private name (``_x``) of another, nor reaches for one as
  ``module._x``: a name another module needs is public, with its docstring;
- a format family's package (``readers/ipc/``, ``readers/parquet/``) has one face: no
  module outside it imports one of its modules, only the package itself;
- no import cycles, lazy imports inside functions included (only a package
  ``__init__``'s lazy re-exports may close one: they run after the package is loaded).

Every check is also run on a small made-up package holding one violation of it, so none
passes for want of seeing anything."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import gpu_profiler
import gpu_profiler.kernels

ROOTS = {"gpu_profiler.kernels": Path(gpu_profiler.kernels.__path__[0]),
         "gpu_profiler": Path(gpu_profiler.__path__[0])}
#: What the kernels may import from outside the package (and the standard library).
KERNEL_DEPENDENCIES = {"numpy", "numba", "llvmlite"}
#: Modules that compute results and must not import renderers (packages: every module in).
BELOW_RENDER = ("gpu_profiler.histogram", "gpu_profiler.cache", "gpu_profiler.sampler",
                "gpu_profiler.analysis")
#: Format families: a package whose modules only the package itself may import.
FORMAT_PACKAGES = ("gpu_profiler.readers.ipc", "gpu_profiler.readers.parquet")
#: All the io layer may import of the package besides itself.
UNDER_IO = ("gpu_profiler.errors", "gpu_profiler.frozen", "gpu_profiler.native",
            "gpu_profiler.kernels")


@dataclass(frozen=True)
class Import:
    """One module ``target`` imported by ``source``: ``names`` taken from it (``from target
    import names``; empty for a module imported whole), inside a function (``lazy``) or
    under ``if TYPE_CHECKING:`` (``typing``)."""

    source: str
    target: str
    names: tuple[str, ...]
    lazy: bool
    typing: bool
    line: int


def modules(roots: dict[str, Path] = ROOTS) -> dict[str, Path]:
    """Every module's dotted name and file (a package by its ``__init__.py``)."""
    out = {}
    for package, folder in roots.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts
                     if p != "__init__"]
            if package == "gpu_profiler" and parts[:1] == ["kernels"]:
                continue
            out[".".join([package, *parts])] = path
    return out


@cache
def _parsed(path: Path) -> tuple[ast.Module, dict[ast.AST, ast.AST]]:
    """A module's tree and each node's parent (parsed once per run)."""
    tree = ast.parse(path.read_text())
    return tree, {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}


def _within(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[bool, bool]:
    """``(inside a function, under if TYPE_CHECKING)``."""
    lazy = typing = False
    while node in parents:
        node = parents[node]
        lazy |= isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        typing |= isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    return lazy, typing


def _absolute(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, a relative one resolved against ``name``."""
    if not node.level:
        return node.module or ""
    package = name.split(".")[:None if path.name == "__init__.py" else -1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + [node.module] if node.module else base)


def imports(mods: dict[str, Path]) -> Iterator[Import]:
    """Every import of every module; ``from package import module`` is an import of that
    module, ``from module import name`` one of the module."""
    for name, path in mods.items():
        tree, parents = _parsed(path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            lazy, typing = _within(node, parents)
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield Import(name, a.name, (), lazy, typing, node.lineno)
                continue
            module = _absolute(name, path, node)
            taken = []
            for a in node.names:
                if f"{module}.{a.name}" in mods:
                    yield Import(name, f"{module}.{a.name}", (), lazy, typing, node.lineno)
                else:
                    taken.append(a.name)
            if taken:
                yield Import(name, module, tuple(taken), lazy, typing, node.lineno)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# ---------------------------------------------------------------- the checks
def kernels_reaching_out(mods: dict[str, Path]) -> list[str]:
    """Imports of the kernels of anything but themselves, numpy, numba, llvmlite and the
    standard library."""
    allowed = KERNEL_DEPENDENCIES | set(sys.stdlib_module_names)  # (not gpu_profiler)
    return [f"{i.source}:{i.line} imports {i.target}" for i in imports(mods)
            if _under(i.source, ("gpu_profiler.kernels",))
            and not _under(i.target, ("gpu_profiler.kernels",))
            and i.target.split(".")[0] not in allowed]


def layers_crossed(mods: dict[str, Path]) -> list[str]:
    """Imports of render/ by the modules that compute results, and of anything above io/
    by io/."""
    out = []
    for i in imports(mods):
        if _under(i.source, BELOW_RENDER) and _under(i.target, ("gpu_profiler.render",)):
            out.append(f"{i.source}:{i.line} imports {i.target}")
        if (_under(i.source, ("gpu_profiler.io",)) and _under(i.target, ("gpu_profiler",))
                and not _under(i.target, ("gpu_profiler.io", *UNDER_IO))):
            out.append(f"{i.source}:{i.line} imports {i.target}")
    return out


def faces_bypassed(mods: dict[str, Path]) -> list[str]:
    """Imports of a format package's modules from outside that package."""
    return [f"{i.source}:{i.line} imports {i.target}" for i in imports(mods)
            for p in FORMAT_PACKAGES
            if i.target.startswith(p + ".") and not _under(i.source, (p,))]


def private_reaches(mods: dict[str, Path]) -> list[str]:
    """Private names of one module imported by, or read as ``module._x`` in, another."""
    out = [f"{i.source}:{i.line} imports {', '.join(n for n in i.names if _private(n))} "
           f"from {i.target}" for i in imports(mods)
           if i.target in mods and i.target != i.source and any(map(_private, i.names))]
    for name, path in mods.items():
        tree, _ = _parsed(path)
        bound = {}  # local name -> module of the package it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {a.asname: a.name for a in node.names if a.asname and a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(name, path, node)
                bound |= {a.asname or a.name: f"{module}.{a.name}" for a in node.names
                          if f"{module}.{a.name}" in mods}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            owner = (bound.get(node.value.id) if isinstance(node.value, ast.Name)
                     else ast.unparse(node.value))
            if owner in mods and owner != name:
                out.append(f"{name}:{node.lineno} reads {owner}.{node.attr}")
    return out


def graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at run time: not under TYPE_CHECKING;
    lazily or not, but for a package ``__init__``'s lazy re-exports)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for i in imports(mods):
        reexport = i.lazy and mods[i.source].name == "__init__.py"
        if i.target in mods and i.target != i.source and not i.typing and not reexport:
            edges[i.source].add(i.target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


# ---------------------------------------------------------------- the package
def test_the_kernels_import_only_themselves_numpy_numba_llvmlite_and_the_stdlib():
    assert kernels_reaching_out(modules()) == []


def test_results_never_import_renderers_and_io_nothing_above_it():
    assert layers_crossed(modules()) == []


def test_a_format_package_is_imported_only_as_a_whole():
    assert faces_bypassed(modules()) == []


def test_no_private_name_crosses_a_module():
    assert private_reaches(modules()) == []


def test_no_import_cycles():
    assert cycles(graph(modules())) == []


def test_the_graph_is_seen():
    mods = modules()
    edges = graph(mods)
    assert "gpu_profiler.kernels.ipc_format" in edges["gpu_profiler.kernels.ipc"]
    assert "gpu_profiler.analysis.interleave" in edges["gpu_profiler.sampler"]  # top level
    assert "gpu_profiler.io.output" in edges["gpu_profiler.histogram"]  # in a function
    assert "gpu_profiler.readers.memory" not in edges["gpu_profiler.readers"]  # re-export
    assert "gpu_profiler.readers.memory" in {i.target for i in imports(mods)}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---------------------------------------------------------------- a package breaking each
MADE_UP = {
    "gpu_profiler/__init__.py": "def __getattr__(n):\n    from gpu_profiler import lazy\n",
    "gpu_profiler/lazy.py": "import gpu_profiler\n",
    "gpu_profiler/errors.py": "",
    "gpu_profiler/analysis/__init__.py": "",
    "gpu_profiler/render/__init__.py": "",
    "gpu_profiler/render/table.py": "",
    "gpu_profiler/io/__init__.py": "",
    "gpu_profiler/io/output.py": "from gpu_profiler.errors import ProfilerError\n",
    "gpu_profiler/readers/__init__.py": "",
    "gpu_profiler/readers/ipc/__init__.py":
        "def f():\n    from gpu_profiler.readers.ipc import many\n",
    "gpu_profiler/readers/ipc/many.py": "from gpu_profiler.readers.ipc.layout import x\n",
    "gpu_profiler/readers/ipc/layout.py": "x = 1\n",
    "kernels/__init__.py": "",
    "kernels/cpu.py": "import os\n\nimport numpy as np\nfrom numba import njit\n\n"
                      "from gpu_profiler.kernels.stats import NULLS\n",
    "kernels/stats.py": "NULLS = 4\n",
}
BROKEN = {
    "a kernel importing a reader": (
        kernels_reaching_out, "kernels/cpu.py", "from gpu_profiler.readers.ipc import X\n"),
    "a kernel importing pyarrow": (
        kernels_reaching_out, "kernels/stats.py", "def f():\n    import pyarrow\n"),
    "a kernel importing the package": (
        kernels_reaching_out, "kernels/stats.py", "from .. import errors\n"),
    "an analysis importing a renderer": (
        layers_crossed, "gpu_profiler/analysis/schedule.py",
        "def f():\n    from gpu_profiler.render.table import x\n"),
    "io importing a renderer": (
        layers_crossed, "gpu_profiler/io/files.py", "from gpu_profiler.render import table\n"),
    "a format package's module imported from outside": (
        faces_bypassed, "gpu_profiler/execute.py", "from gpu_profiler.readers.ipc.many import x\n"),
    "a private name imported": (
        private_reaches, "gpu_profiler/render/compare.py",
        "from gpu_profiler.io.output import _target\n"),
    "a private name read off a module": (
        private_reaches, "gpu_profiler/render/compare.py",
        "from gpu_profiler.io import output as o\n\nx = o._target\n"),
    "a private name read off a dotted module": (
        private_reaches, "gpu_profiler/render/compare.py",
        "import gpu_profiler.io.output\n\nx = gpu_profiler.io.output._target\n"),
    "a cycle closed by a lazy import": (
        lambda mods: cycles(graph(mods)), "gpu_profiler/errors.py",
        "def f():\n    from gpu_profiler.io.output import write\n"),
}


def _made_up(tmp: Path, extra: dict[str, str]) -> dict[str, Path]:
    for rel, text in {**MADE_UP, **extra}.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return modules({"gpu_profiler.kernels": tmp / "kernels",
                    "gpu_profiler": tmp / "gpu_profiler"})


def test_the_made_up_package_passes_every_check(tmp_path):
    mods = _made_up(tmp_path, {})
    for check in (kernels_reaching_out, layers_crossed, faces_bypassed, private_reaches):
        assert check(mods) == []
    # gpu_profiler -> lazy -> gpu_profiler is no cycle: the first is a lazy re-export
    assert "gpu_profiler.lazy" not in graph(mods)["gpu_profiler"]
    assert cycles(graph(mods)) == []


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_check_finds_its_violation(tmp_path, case):
    check, rel, text = BROKEN[case]
    assert check(_made_up(tmp_path, {rel: text}))
