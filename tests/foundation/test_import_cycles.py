"""No import cycles inside gigpo/rollout and gigpo/trainer, lazy (in-function) imports included.

A cycle hidden behind a lazy import still ties the modules together: neither can be read, tested or
moved alone (issue 27 found generator.py <-> every backend). The graph is read from the source with
`ast`, so the test imports nothing and takes milliseconds. Imports under `if TYPE_CHECKING:` never run,
and are checked both without and with them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gigpo.rollout", "gigpo.trainer")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / "gigpo").rglob("*.py")}


def _nodes(tree: ast.AST, type_only: bool):
    """Every node, those under `if TYPE_CHECKING:` only when `type_only`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not type_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports_of(name: str, path: Path, modules: dict[str, Path], type_only: bool = False) -> set[str]:
    """gigpo modules `name` imports anywhere in its body (`from pkg import submodule` counts as the submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(ast.parse(path.read_text(), str(path)), type_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules and m != name}


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules, type_only) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]], nodes: set[str]) -> list[str]:
    """One cycle through the sub-graph on `nodes`, as a path that returns to its start; [] if none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node] & nodes):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(nodes):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return []


@pytest.mark.parametrize("type_only", [False, True], ids=["runtime", "with-type-only"])
@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_the_package(package, type_only):
    """Type-only imports count too (issue 57): a cycle that only a type checker follows still means neither
    module can be read alone, as memory_phases.py <-> setup.py did."""
    graph = import_graph(type_only)
    inside = {m for m in graph if m == package or m.startswith(package + ".")}
    assert inside, f"no modules found under {package}"
    cycle = find_cycle(graph, inside)
    assert not cycle, f"import cycle in {package}: {' -> '.join(cycle)}"


def test_the_checker_finds_a_cycle_through_a_lazy_import(tmp_path):
    """The checker itself: a cycle closed only by an in-function import is still found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph, set(graph)) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}, {"a", "b"}) == []
    source = tmp_path / "m.py"
    source.write_text("import os\ndef f():\n    from gigpo.rollout import generator\n"
                      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gigpo.config\n")
    found = imports_of("gigpo.x.m", source, {"gigpo.rollout": source, "gigpo.rollout.generator": source,
                                             "gigpo.config": source})
    assert found == {"gigpo.rollout", "gigpo.rollout.generator"}
    with_types = imports_of("gigpo.x.m", source, {"gigpo.rollout": source, "gigpo.rollout.generator": source,
                                                  "gigpo.config": source}, type_only=True)
    assert with_types == {"gigpo.rollout", "gigpo.rollout.generator", "gigpo.config"}
