"""The backend fusion inventory: which operator fusions each compute backend of the target implements.

    inv = scan_path(Path("llama.cpp"), InventorySettings())       # a folder on disk
    inv = scan_workspace(ws)                                        # the target at its baseline
    inv.fusions, inv.gaps, inv.singles, inv.unclassified

A backend is a folder under `backends_root` whose name matches `backend_dir_pattern` (ggml trees:
`ggml/src/ggml-<name>/`). kb/inventory_scan.py reads its sources; this module lays the tree out,
merges what each backend fuses into one table, and derives the gaps: every fusion present in at
least one backend and missing in another, the target backend's gaps first. kb/inventory_store.py
writes the result to the workspace database as evidence.

Fusion keys are the ops in order, without the `GGML_OP_` prefix, views dropped (VIEW, RESHAPE,
PERMUTE, TRANSPOSE, NONE move no data and backends place them differently), runs of one op capped
at two (`ADD+ADD` stands for a chain of two or more ADDs) and unary kinds named when the code names
them (`UNARY:SILU+MUL`; a plain `UNARY` means the kind is chosen at run time). A plain `UNARY`
matches any named kind when gaps are computed, so an unnamed kind never makes a gap by itself.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.config import InventorySettings
from kb.errors import UserError
from kb.inventory_scan import (
    GGML_CALLS,
    BackendScanner,
    Rule,
    ScanOptions,
    SingleOp,
    Site,
    SourceFile,
    Unclassified,
)

if TYPE_CHECKING:
    from kb.workspace import Workspace

GGML_ROOTS = ("ggml/src", "src", "")
GGML_BACKEND_DIR = r"ggml-(?P<name>[A-Za-z0-9][\w-]*)"


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

    def to_json(self) -> dict[str, Any]:
        """The shape `kb inventory --json` prints (issue 3)."""
        return {
            "commit": self.commit,
            "backends": self.backends,
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


# --- source trees ------------------------------------------------------------------------------------


class Tree:
    """Files of a source tree by relative path (a folder on disk, or a commit of a git repository)."""

    label: str

    def paths(self) -> list[str]:
        raise NotImplementedError

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        raise NotImplementedError


class DirTree(Tree):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)

    def paths(self) -> list[str]:
        out: list[str] = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            rel = os.path.relpath(folder, self.root)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            out.extend(prefix + name for name in sorted(files))
        return out

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for rel in paths:
            try:
                out[rel] = (self.root / rel).read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
        return out


class GitTree(Tree):
    """A commit of a (bare) repository: one `ls-tree` for the paths, one `cat-file --batch` for the texts."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        from kb import gitrepo

        self.repo = gitrepo.open_repo(git_dir)
        self.commit = commit
        self.label = f"{git_dir}@{commit[:12]}"

    def paths(self) -> list[str]:
        from kb import gitrepo

        return gitrepo.list_files(self.repo, self.commit)

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        from kb import gitrepo

        return gitrepo.read_files(self.repo, self.commit, list(paths))


# --- layout and rules --------------------------------------------------------------------------------


@dataclass
class Layout:
    root: str
    backends: dict[str, list[str]]
    shared: list[str]


def _is_source(path: str, extensions: Iterable[str]) -> bool:
    return any(path.endswith(ext) for ext in extensions)


def find_layout(paths: Sequence[str], settings: InventorySettings) -> Layout | None:
    """The backends folder and its backends (only folders that hold sources count)."""
    ggml = not settings.backends_root
    roots = GGML_ROOTS if ggml else (settings.backends_root.strip("/"),)
    pattern = re.compile(settings.backend_dir_pattern or (GGML_BACKEND_DIR if ggml else r"(?P<name>[\w.-]+)"))
    for root in roots:
        prefix = f"{root}/" if root else ""
        backends: dict[str, list[str]] = {}
        shared: list[str] = []
        for path in paths:
            if not path.startswith(prefix) or not _is_source(path, settings.extensions):
                continue
            rest = path[len(prefix) :].split("/")
            if len(rest) == 1:
                shared.append(path)
                continue
            m = pattern.fullmatch(rest[0])
            if m is None:
                continue
            name = (m.groupdict().get("name") or m.group(0)).lower()
            backends.setdefault(name, []).append(path)
        if backends:
            return Layout(root, dict(sorted(backends.items())), shared)
    return None


def rules_for(backend: str, settings: InventorySettings) -> list[Rule]:
    """The configured rules that apply to `backend`, or ggml's built-in rule when none are configured."""
    if not settings.rules:
        return [Rule()]
    out: list[Rule] = []
    for rule in settings.rules:
        if rule.backend_glob and not fnmatch.fnmatch(backend, rule.backend_glob):
            continue
        out.append(
            Rule(
                calls=tuple(rule.call),
                op_prefix=rule.op_prefix,
                unary_prefix=rule.unary_prefix,
                pattern=re.compile(rule.pattern) if rule.pattern else None,
            )
        )
    return out


def scan_options(settings: InventorySettings) -> ScanOptions:
    return ScanOptions(
        view_ops=frozenset(settings.view_ops),
        single_ops=tuple(settings.single_ops),
        reorder=re.compile(settings.reorder_functions),
    )


# --- scanning ----------------------------------------------------------------------------------------


def scan_tree(tree: Tree, settings: InventorySettings, *, commit: str | None = None) -> Inventory:
    """Scan every backend of `tree`; a tree without recognisable backends is a UserError."""
    layout = find_layout(tree.paths(), settings)
    if layout is None:
        where = settings.backends_root or "ggml/src"
        raise UserError(
            f"{tree.label}: no recognisable backends (looked for {where}/"
            f"{'ggml-<name>' if not settings.backends_root else '<backend>'}/ folders with sources; "
            "set kb.inventory.backends_root and backend_dir_pattern for other layouts)"
        )
    wanted = [p for files in layout.backends.values() for p in files]
    texts = tree.read(wanted)
    shared_text: dict[str, str] | None = None
    options = scan_options(settings)
    sites: list[Site] = []
    inv = Inventory(
        root=tree.label,
        commit=commit,
        backends=list(layout.backends),
        target_backend=settings.target_backend,
        files_scanned=len(texts),
    )
    for backend, files in layout.backends.items():
        sources = [SourceFile(p, texts[p]) for p in files if p in texts]
        for rule in rules_for(backend, settings):
            needles = (rule.op_prefix, *rule.calls)
            relevant = [s for s in sources if any(n in s.raw for n in needles)]
            if not relevant:
                continue
            if shared_text is None:
                shared_text = tree.read(layout.shared)
            shared = [SourceFile(p, t) for p, t in shared_text.items() if rule.op_prefix in t]
            result = BackendScanner(backend, relevant, shared, rule, options).scan()
            sites.extend(result.sites)
            inv.unclassified.extend(result.unclassified)
            inv.excluded.extend(result.excluded)
            inv.singles.extend(
                s for s in result.singles if (s.backend, s.op) not in {(x.backend, x.op) for x in inv.singles}
            )
    inv.fusions = merge_sites(sites)
    inv.unclassified = _dedupe_notes(inv.unclassified)
    inv.excluded = _dedupe_notes(inv.excluded)
    inv.gaps = find_gaps(inv.fusions, inv.backends, settings.target_backend)
    return inv


def _dedupe_notes(notes: list[Unclassified]) -> list[Unclassified]:
    seen: dict[tuple[str, str, int, str], Unclassified] = {}
    for n in notes:
        seen.setdefault((n.backend, n.file, n.line, n.why), n)
    return sorted(seen.values(), key=lambda n: (n.backend, n.file, n.line))


def merge_sites(sites: Iterable[Site]) -> list[Fusion]:
    """One fusion per (backend, ops): the first place in file order, with the others listed."""
    grouped: dict[tuple[str, tuple[str, ...]], list[Site]] = {}
    for s in sites:
        grouped.setdefault((s.backend, s.ops), []).append(s)
    out: list[Fusion] = []
    for (backend, ops), group in grouped.items():
        group.sort(key=lambda s: (s.file, s.line))
        first = group[0]
        places = tuple(dict.fromkeys((s.file, s.line) for s in group))
        out.append(
            Fusion(ops, backend, first.file, first.line, first.how, first.snippet, first.raw_ops, places)
        )
    out.sort(key=lambda f: (f.key, f.backend))
    return out


def _covers(have: tuple[str, ...], want: tuple[str, ...]) -> bool:
    """`have` implements `want` (a plain UNARY on either side matches any named kind)."""
    if len(have) != len(want):
        return False
    for a, b in zip(have, want, strict=True):
        if a == b:
            continue
        if a.split(":")[0] == b.split(":")[0] == "UNARY" and (":" not in a or ":" not in b):
            continue
        return False
    return True


def find_gaps(fusions: Sequence[Fusion], backends: Sequence[str], target: str) -> list[Gap]:
    """Every fusion present in >= 1 backend and missing in another; the target's gaps first."""
    by_backend: dict[str, set[tuple[str, ...]]] = {}
    for f in fusions:
        by_backend.setdefault(f.backend, set()).add(f.ops)
    keys = sorted({f.ops for f in fusions})
    gaps: list[Gap] = []
    for ops in keys:
        present = tuple(b for b in backends if ops in by_backend.get(b, set()))
        missing = tuple(
            b
            for b in backends
            if b not in present and not any(_covers(have, ops) for have in by_backend.get(b, set()))
        )
        if present and missing:
            gaps.append(Gap(ops, present, missing, target in missing))
    gaps.sort(key=lambda g: (not g.target_missing, -len(g.present), "+".join(g.ops)))
    return gaps


def scan_path(path: Path, settings: InventorySettings, *, commit: str | None = None) -> Inventory:
    """Scan a folder on disk; the commit defaults to the checkout's HEAD when it is a git work tree."""
    if not path.exists():
        raise UserError(f"{path}: no such folder")
    if not path.is_dir():
        raise UserError(f"{path}: not a folder")
    if commit is None:
        commit = _head_of(path)
    return scan_tree(DirTree(path.resolve()), settings, commit=commit)


def _head_of(path: Path) -> str | None:
    # Only label the scan with a commit when PATH is the top of a checkout (not a folder inside one).
    from kb import gitrepo

    return gitrepo.checkout_head(path)


def scan_workspace(ws: Workspace, settings: InventorySettings | None = None) -> Inventory:
    """The workspace's target at its baseline commit, read straight from the bare mirror."""
    config = ws.settings
    commit = config.target.baseline_commit or config.target.baseline
    if not ws.mirror_path.exists():
        raise UserError(f"{ws.mirror_path}: the workspace has no mirror of the target")
    return scan_tree(GitTree(ws.mirror_path, commit), settings or config.kb.inventory, commit=commit)


def matrix(inv: Inventory) -> list[tuple[str, dict[str, bool], Gap | None]]:
    """Rows of the fusions x backends table: key, presence per backend, and its gap (if any)."""
    cells = inv.cells()
    gaps = {g.key: g for g in inv.gaps}
    order = [g.key for g in inv.gaps] + sorted(k for k in cells if k not in gaps)
    return [(key, {b: b in cells[key] for b in inv.backends}, gaps.get(key)) for key in order]


__all__ = [
    "GGML_CALLS",
    "DirTree",
    "Fusion",
    "Gap",
    "GitTree",
    "Inventory",
    "SingleOp",
    "Tree",
    "Unclassified",
    "find_gaps",
    "matrix",
    "scan_path",
    "scan_tree",
    "scan_workspace",
]
