"""Scanning a tree: lay it out, scan each backend, merge what each fuses, derive the gaps.

The gaps are every fusion present in at least one backend and missing in another, the target
backend's gaps first. A plain `UNARY` matches any named kind when gaps are computed, so an unnamed
kind never makes a gap by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kb.config import InventorySettings
from kb.errors import UserError
from kb.inventory.csource import SourceFile
from kb.inventory.layout import DirTree, GitTree, Tree, find_layout, rules_for, scan_options
from kb.inventory.model import Fusion, Gap, Inventory, Site, Unclassified
from kb.inventory.scanner import BackendScanner

if TYPE_CHECKING:
    from kb.workspace import Workspace


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
        layout=dict(layout.how),
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
            shared = [SourceFile(p, t) for p, t in shared_text.items() if any(n in t for n in needles)]
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
