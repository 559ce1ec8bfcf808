"""What an inventory scan produces: sites, fusions, gaps, single ops and the notes on what was left out.

Fusion keys are the ops in order, without the `GGML_OP_` prefix, views dropped (VIEW, RESHAPE,
PERMUTE, TRANSPOSE, NONE move no data and backends place them differently), runs of one op capped
at two (`ADD+ADD` stands for a chain of two or more ADDs) and unary kinds named when the code names
them (`UNARY:SILU+MUL`; a plain `UNARY` means the kind is chosen at run time). The raw op list of
each fusion is kept whole next to its key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kb.inventory.csource import SourceFile

MAX_VARIANTS = 64
"""Most op lists one call site may stand for (loop values x branches) before it is unclassified."""

DEFAULT_VIEW_OPS = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")
"""Ops that move no data: dropped from fusion keys, so backends that place views differently compare."""

GGML_CALLS = ("ggml_can_fuse", "ggml_can_fuse_ext", "ggml_can_fuse_subgraph", "ggml_can_fuse_subgraph_ext")
REORDER_FUNCTIONS = r"graph_optimi[sz]e|reorder"


class Unresolved(Exception):
    """An op list the scanner cannot resolve; the message says why (it becomes `unclassified`)."""


@dataclass(frozen=True)
class Variant:
    """One op list a fusion check's argument can be, and where it is written when not at the call."""

    ops: tuple[str, ...]
    file: SourceFile | None = None
    pos: int | None = None
    how: str = ""
    unary: tuple[str, ...] | None = None


# --- data the scan produces ------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One fusion found in one backend: the normalised ops, the raw list, and where it is decided."""

    backend: str
    ops: tuple[str, ...]
    raw_ops: tuple[str, ...]
    file: str
    line: int
    how: str
    snippet: str


@dataclass(frozen=True)
class Unclassified:
    backend: str
    file: str
    line: int
    snippet: str
    why: str


@dataclass(frozen=True)
class SingleOp:
    backend: str
    op: str
    file: str
    line: int


@dataclass
class Rule:
    """How one project decides fusions (built from `[[kb.inventory.rules]]`, or the ggml default)."""

    calls: tuple[str, ...] = GGML_CALLS
    op_prefix: str = "GGML_OP_"
    unary_prefix: str = "GGML_UNARY_OP_"
    pattern: re.Pattern[str] | None = None


@dataclass
class ScanOptions:
    view_ops: frozenset[str] = frozenset(DEFAULT_VIEW_OPS)
    single_ops: tuple[str, ...] = ("SOFT_MAX", "FLASH_ATTN_EXT", "GLU")
    unary_op: str = "UNARY"
    reorder: re.Pattern[str] = field(default_factory=lambda: re.compile(REORDER_FUNCTIONS))


@dataclass
class BackendResult:
    sites: list[Site] = field(default_factory=list)
    unclassified: list[Unclassified] = field(default_factory=list)
    excluded: list[Unclassified] = field(default_factory=list)
    singles: list[SingleOp] = field(default_factory=list)


def normalise(ops: Iterable[str], view_ops: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The fusion key: views dropped, runs of one op capped at two (`ADD+ADD` = a chain of ADDs)."""
    out: list[str] = []
    for op in ops:
        if op in view_ops:
            continue
        if len(out) >= 2 and out[-1] == op and out[-2] == op:
            continue
        out.append(op)
    return tuple(out)


@dataclass(frozen=True)
class Fusion:
    """One (fusion, backend) cell: where the backend decides it, and every other place it does."""

    ops: tuple[str, ...]
    backend: str
    file: str
    line: int
    how: str
    snippet: str
    raw_ops: tuple[str, ...]
    sites: tuple[tuple[str, int], ...] = ()

    @property
    def key(self) -> str:
        return "+".join(self.ops)


@dataclass(frozen=True)
class Gap:
    ops: tuple[str, ...]
    present: tuple[str, ...]
    missing: tuple[str, ...]
    target_missing: bool
    id: int | None = None

    @property
    def key(self) -> str:
        return "+".join(self.ops)


@dataclass
class Inventory:
    root: str
    """The path scanned (a folder, or `repo@commit` for a scan of the workspace mirror)."""
    commit: str | None
    backends: list[str]
    target_backend: str
    fusions: list[Fusion] = field(default_factory=list)
    singles: list[SingleOp] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    unclassified: list[Unclassified] = field(default_factory=list)
    excluded: list[Unclassified] = field(default_factory=list)
    files_scanned: int = 0
    layout: dict[str, str] = field(default_factory=dict)
    """Backend -> how it was recognised (a folder, files, the old layout's CPU files, the config)."""

    def to_json(self) -> dict[str, Any]:
        """The shape `kb inventory --json` prints (issue 3)."""
        return {
            "commit": self.commit,
            "backends": self.backends,
            "layout": self.layout,
            "fusions": [
                {"ops": list(f.ops), "backend": f.backend, "file": f.file, "line": f.line}
                for f in self.fusions
            ],
            "gaps": [
                {"id": g.id, "ops": list(g.ops), "present": list(g.present), "missing": list(g.missing)}
                for g in self.gaps
            ],
            "unclassified": [
                {"backend": u.backend, "file": u.file, "line": u.line, "snippet": u.snippet, "why": u.why}
                for u in self.unclassified
            ],
        }

    def cells(self) -> dict[str, set[str]]:
        """Fusion key -> backends that fuse it."""
        out: dict[str, set[str]] = {}
        for f in self.fusions:
            out.setdefault(f.key, set()).add(f.backend)
        return out


class Reporter:
    """What one backend's scan reports: sites (normalised to fusion keys), and the notes on what was
    left out (excluded) or could not be read (unclassified), each with file, line, snippet and
    reason. It also remembers which functions already hold a fusion or name a table's rows, so the
    last pass (hand-written matchers) does not report them again."""

    def __init__(self, backend: str, options: ScanOptions) -> None:
        self.backend = backend
        self.options = options
        self.result = BackendResult()
        self.site_functions: set[tuple[str, int]] = set()
        """(file, function start) of every function where a fusion was decided."""
        self.table_functions: set[str] = set()
        """Functions a registry table names in its rows (each row's helper)."""

    def emit(
        self,
        f: SourceFile,
        pos: int,
        raw: tuple[str, ...],
        unary: tuple[str, ...] | None,
        how: str,
        snippet_pos: int,
    ) -> None:
        ops = list(raw)
        if unary:
            slots = [i for i, op in enumerate(ops) if op == self.options.unary_op]
            if len(slots) == len(unary):
                for i, kind in zip(slots, unary, strict=True):
                    ops[i] = f"{self.options.unary_op}:{kind}"
        normal = normalise(ops, self.options.view_ops)
        if len(normal) < 2:
            self.exclude(f, snippet_pos, f"{'+'.join(raw)}: one op left once views are dropped")
            return
        self.result.sites.append(
            Site(self.backend, normal, tuple(ops), f.path, f.line_of(pos), how, f.snippet(snippet_pos))
        )

    def unclassified(self, f: SourceFile, pos: int, why: str) -> None:
        self.result.unclassified.append(
            Unclassified(self.backend, f.path, f.line_of(pos), f.snippet(pos), why)
        )

    def exclude(self, f: SourceFile, pos: int, why: str) -> None:
        self.result.excluded.append(Unclassified(self.backend, f.path, f.line_of(pos), f.snippet(pos), why))
