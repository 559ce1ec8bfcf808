"""No import circle among kb, runner and tui modules, not even one hidden behind a function-level import.

import-linter checks the layers between packages; a circle between two modules of one layer (a
module that imports another inside a function because the other imports it at the top) slips
through. This test builds the graph from the source with `ast`, counting imports anywhere in a
module (inside functions too) and those under `if TYPE_CHECKING:` as well: a type-only import does
not run, but it still says that one module's meaning depends on the other, and a circle of meanings
is the same tangle for the next reader as a circle of imports.
A package's `__init__` is a node like any module: importing `kb.store.rows` adds no edge to `kb`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kb", "runner", "tui")

# Cycles through files other people own right now; each entry may only disappear (the last test
# fails when one is no longer a cycle, so the set is kept honest). Empty is the goal.
KNOWN_CYCLES: set[frozenset[str]] = {
    # The SkyPilot fleet's mixins through their state module (type-only edges): being recomposed.
    frozenset(
        {
            "runner.fleet.skypilot.costs",
            "runner.fleet.skypilot.jobs",
            "runner.fleet.skypilot.state",
            "runner.fleet.skypilot.teardown",
        }
    ),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, those guarded by `if TYPE_CHECKING:` included."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (module level, function level and TYPE_CHECKING)."""
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import sub` imports the submodule when there is one, else a name of pkg.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
    return "{" + ", ".join(sorted(component)) + "}: " + "; ".join(edges)


def test_graph_sees_function_level_and_type_only_imports() -> None:
    # The builder must not be blind to the very imports this test is about.
    graph = import_graph()
    assert graph["tui.cli"], "tui/cli imports its commands lazily; the graph should still see them"
    assert "kb.workspace" in graph["runner.research.miners.base"], "a TYPE_CHECKING import is an edge"


def test_no_import_cycles() -> None:
    graph = import_graph()
    unexpected = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert not unexpected, "import cycles:\n" + "\n".join(describe(c, graph) for c in unexpected)


def test_known_cycles_still_exist() -> None:
    # An entry that is no longer a cycle must leave KNOWN_CYCLES, so the exceptions only shrink.
    present = set(cycles(import_graph()))
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in present]
    assert not gone, f"no longer cycles, remove from KNOWN_CYCLES: {gone}"
