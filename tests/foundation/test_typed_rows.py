"""The data layer hands out typed rows: no public function of kb/store returns a bare
`dict[str, Any]` (or a list of them), so mypy checks every key a caller reads, and a migration that
changes a column is answered in kb/store/tables.py and the row types beside the queries.

What may still say `dict[str, Any]`: arguments (values to write, JSON to merge), JSON built for
`--json` (`to_json`), and the untyped helpers of kb/store/paging.py that the stores use inside
their own typed reads (nothing outside kb/store imports them: checked here too)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.foundation.sql_scan import ROOT

STORE = ROOT / "kb" / "store"
UNTYPED_HELPERS = {("paging.py", "rows"), ("paging.py", "one")}
"""The stores' own untyped reads (each store wraps them in a typed function)."""
JSON_METHODS = {"to_json"}


def _returns(path: Path) -> list[tuple[str, int, str]]:
    """(function name, line, its return annotation) of every public function and method."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        public = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
        if public and node.returns is not None:
            found.append((node.name, node.lineno, ast.unparse(node.returns)))
    return found


def test_no_store_read_returns_an_untyped_row() -> None:
    untyped = [
        f"kb/store/{path.name}:{line} {name} -> {returns}"
        for path in sorted(STORE.glob("*.py"))
        for name, line, returns in _returns(path)
        if "dict[str, Any]" in returns.replace(" ", "").replace(",", ", ")
        and (path.name, name) not in UNTYPED_HELPERS
        and name not in JSON_METHODS
    ]
    assert not untyped, "kb/store reads that return untyped rows (give them a TypedDict):\n" + "\n".join(
        untyped
    )


def test_the_scan_sees_the_store() -> None:
    """The scan reads real modules: a typed read is found with its annotation."""
    names = {name: returns for name, _, returns in _returns(STORE / "experiments.py")}
    assert names["live_among"] == "list[ExperimentRow]"


def test_the_untyped_helpers_stay_inside_the_store() -> None:
    outside = []
    for top in ("kb", "runner", "tui"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if STORE in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "kb.store.paging":
                    used = {a.name for a in node.names} & {"rows", "one"}
                    if used:
                        outside.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {sorted(used)}")
    assert not outside, "\n".join(outside)
