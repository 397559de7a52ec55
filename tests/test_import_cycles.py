"""No import cycle among the project's modules, function-level imports counted (docs/design.md "Layers", "House style").

Walks every module of the project's apps with :mod:`ast` — imports at the top and inside
functions alike — and fails on any cycle in the resulting graph. A function-level import of a
project module is allowed only in an AppConfig's ``ready()``, where Django's app loading
requires it.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Every top-level package of the repository but the tests: a new app (a new kind) is walked unlisted.
PACKAGES = tuple(sorted(path.parent.name for path in REPO.glob("*/__init__.py") if path.parent.name != "tests"))


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (``a.b.c`` may name a module or a symbol of ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """``(imported project module, where)`` for every import in the file; where is "top" or the function."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{alias.name}" for alias in child.names]
            else:
                names = []
            for name in names:
                target = _resolve(name, modules)
                if target is not None:
                    found.append((target, where))
            visit(child, inner)

    visit(tree, "top")
    return found


def graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = project_modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    lazy = []
    for name, path in modules.items():
        for target, where in imports_of(path, modules):
            if target != name:
                edges[name].add(target)
            if where != "top" and not (path.name == "apps.py" and where == "ready"):
                lazy.append(f"{name} imports {target} inside {where}()")
    return edges, lazy


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        result.append(sorted(component))
    return result


def test_it_finds_no_import_cycle_among_the_projects_modules():
    edges, _lazy = graph()
    assert len(edges) > 50  # the walk found the project
    assert cycles(edges) == []


def test_it_walks_every_package_of_the_project():
    assert {"portal", "core", "workloads", "cluster", "slipway"} <= set(PACKAGES)
    assert "tests" not in PACKAGES


def test_it_finds_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_project_modules_are_imported_at_the_top_except_in_app_loading():
    _edges, lazy = graph()
    assert lazy == []
