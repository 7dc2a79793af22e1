"""The package's import graph has no cycles (lazy imports inside functions count too): data
flows one way, readers -> engine -> backends -> analysis -> render -> cli."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_profiler
import gpu_profiler.kernels

ROOTS = {"gpu_profiler.kernels": Path(gpu_profiler.kernels.__path__[0]),
         "gpu_profiler": Path(gpu_profiler.__path__[0])}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in ROOTS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "gpu_profiler" and parts[:1] == ["kernels"]:
                continue
            out[name] = path
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()

    def under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                return True
        return False

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            if under_type_checking(node, parents):
                continue
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets += [s for s in subs if s in mods]
                if not all(s in mods for s in subs):
                    targets.append(node.module)
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            edges[name] |= {t for t in targets if t in mods and t != name}
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


def test_the_graph_is_seen():
    edges = graph()
    assert "gpu_profiler.kernels.ipc_format" in edges["gpu_profiler.kernels.ipc"]
    assert "gpu_profiler.analysis.interleave" in edges["gpu_profiler.sampler"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(graph()) == []
