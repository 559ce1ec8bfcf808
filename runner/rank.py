"""The rank: how relevant a hypothesis is to the target, 0-100, with the reasons stored next to it.

    report = rerank(ws, db)          # every hypothesis (and the families); after `hypotheses mine`
    rerank(ws, db, ids=[42])         # one new hypothesis (`queue add`, `hypotheses generate`)

Six parts, each a value from 0 to 1 times its weight (the points add up to the rank):

| part | weight | 1.0 when | from |
| --- | --- | --- | --- |
| backend | 25 | it touches the target backend's files only | `commits.backends`, the patch's files |
| hot | 20 | it touches functions the baseline's profile spends >= 10% in | PROFILE lines, gaps, paths |
| claim | 25 | it claims a large gain of the primary metric | `commits.claims` (kb.commit_facts) |
| size | 10 | its diff is small (150 changed lines score 0.5) | the patch |
| recency | 5 | it is the fork's newest commit (half-life 180 days) | the commit's date |
| applies | 15 | its patch applies to the baseline as it is | the patch's apply status |

A claim about another metric counts little (a +30% `pp` claim while `tg` is optimised), one that
names no metric counts part-way (kb.commit_facts.claim_weight). Without a profile, `hot` comes from
the inventory's gaps (functions of the ops the target backend does not fuse) and the paths of interest.

Families: a series of fork commits on the same functions (Jaccard >= 0.5 of the function names their
hunks name, else of their files) each within FAMILY_DAYS of the previous one is one family; its id is
its first member's. The queue runs a family's best member first (kb/store/queue.py).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb.commit_facts import (
    Claim,
    base_name,
    best_claim,
    claim_weight,
    claims_from_json,
    metric_kind,
    parse_claims,
    touched_functions,
)
from kb.db import transaction
from kb.jsoncol import decoded
from kb.store import ranking as store

if TYPE_CHECKING:
    from kb.inventory.layout import HistoryBackends
    from kb.workspace import Workspace

WEIGHTS: dict[str, float] = {"backend": 25, "hot": 20, "claim": 25, "size": 10, "recency": 5, "applies": 15}
HOT_SHARE = 0.10
"""A function holding this share of the profile or more is as hot as it gets."""
SIZE_HALF = 150
"""Changed lines at which the size part is one half."""
RECENCY_HALF_DAYS = 180.0
FAMILY_DAYS = 21.0
FAMILY_SIMILARITY = 0.5
_DAY = 86_400.0
_CHANGED = re.compile(r"^[+-](?![+-]{2} )", re.MULTILINE)
_OP_SUFFIX = r"(?:_(?:f32|f16|bf16|back|impl))?$"


@dataclass(frozen=True)
class Target:
    """What relevance is measured against."""

    backend: str
    primary: str | None
    """The primary metric's kind (pp, tg) or None (kb.commit_facts.metric_kind)."""
    primary_name: str
    guards: frozenset[str]
    """The guarded metrics' kinds (pp, tg): a claim on one says it helps a metric that must not fall."""
    paths_of_interest: list[str]
    gap_ops: dict[str, str]
    """op (lowercase, as functions name it) -> the gap it is missing from (`RMS_NORM+MUL`)."""
    profile: dict[str, float]
    """Function base name -> share of the baseline's profile."""
    newest: float | None
    """The newest fork commit's date (epoch seconds): recency is measured from it."""


@dataclass
class Facts:
    """What one hypothesis touches and claims, read once for ranking and families."""

    id: int
    origin: str
    expected_effect: float | None
    created_at: float
    files: list[str] = field(default_factory=list)
    backends: list[str] | None = None
    """None when unknown (no commit facts recorded and no files)."""
    areas: list[str] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    lines: int | None = None
    when: float | None = None
    """The cited fork commit's date."""
    apply: str = "none"
    """ok, rebased, conflict, unchecked, none (no patch)."""
    gap: str | None = None
    """The gap it would close (`RMS_NORM+MUL`), for gap hypotheses."""
    fork_commit: bool = False


@dataclass(frozen=True)
class Part:
    name: str
    value: float
    why: str

    @property
    def points(self) -> float:
        return round(WEIGHTS[self.name] * self.value, 1)


@dataclass
class RankReport:
    ranked: int = 0
    families: int = 0
    """Families of two or more."""
    in_families: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "ranked": self.ranked,
            "families": self.families,
            "in_families": self.in_families,
            "seconds": round(self.seconds, 3),
        }


# --- what the rank is measured against ------------------------------------------------------------


def _epoch(text: Any) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def target_of(ws: Workspace, db: sqlite_utils.Database) -> Target:
    from runner import profile

    settings = ws.settings
    backend = settings.kb.inventory.target_backend
    gap_ops: dict[str, str] = {}
    for gap in store.gaps(db):
        meta = decoded(gap["meta"])
        missing = meta.get("missing") if isinstance(meta, dict) else None
        if isinstance(missing, str):
            missing = [m.strip() for m in missing.split(",")]
        if not isinstance(missing, list) or backend not in missing:
            continue
        ops = meta.get("ops") if isinstance(meta, dict) else None
        names = ops if isinstance(ops, list) else str(ops or gap["title"] or "").split("+")
        for op in names:
            gap_ops.setdefault(str(op).strip().lower(), str(gap["title"]))
    shares: dict[str, float] = {}
    baseline = settings.target.baseline_commit or settings.target.baseline
    for symbol, share in profile.load(db, baseline).items():
        name = base_name(symbol)
        shares[name] = shares.get(name, 0.0) + share
    newest = store.newest_commit_at(db)
    return Target(
        backend=backend,
        primary=metric_kind(settings.metric.primary),
        primary_name=settings.metric.primary,
        guards=frozenset(k for k in (metric_kind(g.metric) for g in settings.metric.guards) if k),
        paths_of_interest=list(settings.target.paths_of_interest),
        gap_ops={op: title for op, title in gap_ops.items() if op},
        profile=shares,
        newest=_epoch(newest),
    )


def _lines(diff: str) -> int:
    return len(_CHANGED.findall(diff))


def _facts(r: store.RankFacts, backends_of: _LazyBackends) -> Facts:
    f = Facts(r["id"], r["origin"], r["expected_effect"], float(r["created_at"]), gap=r["gap"])
    diff = r["patch_diff"] or r["commit_diff"] or ""
    files = decoded(r["patch_files"]) if r["patch_files"] else decoded(r["commit_files"])
    f.files = [str(p) for p in files] if isinstance(files, list) else []
    if r["commit_files"] is not None:
        f.fork_commit = True
        f.when = _epoch(r["authored_at"])
        stored = decoded(r["backends"])
        f.backends = [str(b) for b in stored] if isinstance(stored, list) else None
        areas = decoded(r["areas"])
        f.areas = [str(a) for a in areas] if isinstance(areas, list) else []
        f.claims = (
            claims_from_json(r["claims"])
            if r["claims"] is not None
            else parse_claims(r["message"] or r["subject"] or "")
        )
    if f.backends is None and f.files:
        f.backends, f.areas = backends_of.facts(f.files)
    if f.gap is not None and f.backends is None:
        f.backends = []
    f.functions = touched_functions(diff) if diff else []
    f.lines = _lines(diff) if diff else None
    if r["patch_diff"] is None:
        f.apply = "none"
    elif r["apply_status"] == "conflict":
        f.apply = "conflict"
    elif r["apply_status"] == "ok":
        rebased = r["author_kind"] == "fork_commit" and r["commit_diff"] is not None
        f.apply = "rebased" if rebased and r["patch_diff"] != r["commit_diff"] else "ok"
    else:
        f.apply = "unchecked"
    return f


class _LazyBackends:
    """The backend rules of the baseline tree, read only when a hypothesis needs them (a patch
    with no recorded commit facts)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._rules: HistoryBackends | None = None

    def facts(self, files: list[str]) -> tuple[list[str], list[str]]:
        from kb.commit_facts import commit_facts

        if self._rules is None:
            from kb import gitrepo
            from kb.inventory.layout import HistoryBackends

            settings = self.ws.settings
            repo = gitrepo.open_repo(self.ws.mirror_path)
            baseline = settings.target.baseline_commit or settings.target.baseline
            self._rules = HistoryBackends.for_paths(gitrepo.list_files(repo, baseline), settings.kb.inventory)
        found = commit_facts(files, "", self._rules)
        return found.backends, found.areas


def read_facts(ws: Workspace, db: sqlite_utils.Database, ids: Iterable[int] | None = None) -> Iterator[Facts]:
    """The facts of every hypothesis (or of `ids`), one row at a time (diffs are not kept)."""
    lazy = _LazyBackends(ws)
    for r in store.facts(db, ids):
        yield _facts(r, lazy)


# --- the parts -------------------------------------------------------------------------------------


def _backend_part(f: Facts, t: Target) -> Part:
    if f.gap is not None:
        return Part("backend", 1.0, f"a gap of the {t.backend} backend")
    if f.backends is None:
        return Part("backend", 0.5, "touches no file we know of")
    others = [b for b in f.backends if b != t.backend]
    if t.backend in f.backends:
        if not others:
            return Part("backend", 1.0, f"touches {t.backend} files only")
        return Part("backend", 0.7, f"touches {t.backend} and {', '.join(others)} files")
    if others:
        return Part("backend", 0.0, f"touches only {', '.join(others)} files, not {t.backend}")
    for area, value, why in (
        ("core", 0.5, "core code every backend runs (no backend's own files)"),
        ("model", 0.4, "model code (no backend's own files)"),
    ):
        if area in f.areas:
            return Part("backend", value, why)
    return Part("backend", 0.2, f"no {t.backend} files ({', '.join(f.areas) or 'other'})")


def _matches_op(name: str, op: str) -> bool:
    return re.search(rf"(?:^|_){re.escape(op)}{_OP_SUFFIX}", name) is not None


def _under(path: str, prefixes: list[str]) -> bool:
    import fnmatch

    return any(
        path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") or fnmatch.fnmatch(path, p)
        for p in prefixes
    )


def _hot_part(f: Facts, t: Target) -> Part:
    names = {fn.rsplit("::", 1)[-1] for fn in f.functions}
    if f.gap is not None:
        # A gap's functions are the target's kernels of its ops: hot when the profile names them.
        ops = [op.strip().lower() for op in f.gap.split("+")]
        names |= {sym for sym in t.profile if any(_matches_op(sym, op) for op in ops)}
    hits = sorted(((t.profile[n], n) for n in names if n in t.profile), reverse=True)
    if hits:
        share = sum(s for s, _ in hits)
        named = ", ".join(f"{n} ({s:.0%})" for s, n in hits[:3])
        return Part("hot", min(1.0, share / HOT_SHARE), f"touches {named} of the baseline's profile")
    if f.gap is not None:
        return Part("hot", 0.6, f"{f.gap} is not fused in the {t.backend} backend")
    gaps = sorted({t.gap_ops[op] for n in names for op in t.gap_ops if _matches_op(n, op)})
    if gaps:
        return Part("hot", 0.6, f"touches the kernels of {', '.join(gaps[:3])} (not fused in {t.backend})")
    if t.paths_of_interest and f.files:
        inside = sum(_under(p, t.paths_of_interest) for p in f.files)
        if inside:
            return Part(
                "hot",
                0.3 * inside / len(f.files),
                f"{inside} of {len(f.files)} files under the paths of interest",
            )
    return Part("hot", 0.0, "no hot function (no profile, gap or path of interest touched)")


def _scale(effect: float) -> float:
    """0 -> 0, +2% -> 0.14, +10% -> 0.46, +30% -> 0.81, +50% and more -> 1."""
    return min(1.0, math.log1p(20 * max(effect, 0.0)) / math.log1p(10))


def _claim_part(f: Facts, t: Target) -> Part:
    if f.fork_commit:
        best = best_claim(f.claims, t.primary)
        if best is None:
            return Part("claim", 0.0, "claims no speed-up")
        weight = claim_weight(best, t.primary)
        what = f"+{best.effect:.0%} {best.metric or '(no metric named)'}"
        if weight < 1.0 and best.metric is not None:
            guard = f" ({best.metric} is a guard)" if best.metric in t.guards else ""
            note = f"; the primary metric is {t.primary_name}{guard}: counts little"
        elif weight < 1.0:
            note = f"; counts part-way toward {t.primary_name}"
        else:
            note = ""
        return Part(
            "claim", round(weight * _scale(best.effect), 4), f"claims {what}{note}: {best.text[:80]!r}"
        )
    if f.expected_effect is not None and f.expected_effect > 0:
        return Part(
            "claim",
            round(0.5 * _scale(f.expected_effect), 4),
            f"estimated {f.expected_effect:+.1%} ({f.origin})",
        )
    return Part("claim", 0.0, "no claim or estimate")


def _size_part(f: Facts) -> Part:
    if f.lines is None:
        return Part("size", 0.5, "no patch yet")
    return Part("size", round(1.0 / (1.0 + f.lines / SIZE_HALF), 4), f"{f.lines} changed lines")


def _recency_part(f: Facts, t: Target) -> Part:
    if f.when is None or t.newest is None:
        return Part("recency", 0.5, "not a dated fork commit")
    age = max(0.0, (t.newest - f.when) / _DAY)
    day = time.strftime("%Y-%m-%d", time.gmtime(f.when))
    return Part(
        "recency", round(0.5 ** (age / RECENCY_HALF_DAYS), 4), f"{day}, {age:.0f} days before the newest"
    )


_APPLIES = {
    "ok": (1.0, "applies to the baseline as it is"),
    "rebased": (0.8, "applies after a three-way merge onto the baseline"),
    "conflict": (0.1, "conflicts with the baseline: needs a port"),
    "unchecked": (0.7, "not checked against the baseline yet"),
    "none": (0.4, "no patch yet: the patch writer writes one"),
}


def parts_of(f: Facts, t: Target) -> list[Part]:
    value, why = _APPLIES[f.apply]
    return [
        _backend_part(f, t),
        _hot_part(f, t),
        _claim_part(f, t),
        _size_part(f),
        _recency_part(f, t),
        Part("applies", value, why),
    ]


def rank_of(f: Facts, t: Target) -> tuple[float, dict[str, Any]]:
    """The rank and its reasons (stored as `hypotheses.rank_why`)."""
    parts = parts_of(f, t)
    score = round(sum(p.points for p in parts), 1)
    why: dict[str, Any] = {
        "score": score,
        "parts": [{"name": p.name, "points": p.points, "max": WEIGHTS[p.name], "why": p.why} for p in parts],
        "backends": sorted(set(f.backends or [])) if f.gap is None else [t.backend],
        "functions": f.functions[:12],
        "when": f.when or f.created_at,
    }
    return score, why


# --- families --------------------------------------------------------------------------------------


def _keys(f: Facts) -> frozenset[str]:
    if f.functions:
        return frozenset(f.functions)
    return frozenset(f"file:{p}" for p in f.files)


def families(members: Iterable[Facts]) -> dict[int, int]:
    """{hypothesis id: family id} for fork commits in series on the same functions (or files): each
    joins the family of the latest earlier commit within FAMILY_DAYS whose keys are similar enough
    (Jaccard >= FAMILY_SIMILARITY). Commits alone are left out."""
    dated = sorted((f for f in members if f.fork_commit and f.when is not None), key=lambda f: (f.when, f.id))
    by_key: dict[str, list[tuple[float, int]]] = {}
    keys: dict[int, frozenset[str]] = {}
    family: dict[int, int] = {}
    for f in dated:
        assert f.when is not None
        mine = _keys(f)
        keys[f.id] = mine
        best: tuple[float, int] | None = None
        for key in mine:
            for when, other in reversed(by_key.get(key, [])):
                if f.when - when > FAMILY_DAYS * _DAY:
                    break
                theirs = keys[other]
                similarity = len(mine & theirs) / len(mine | theirs)
                if similarity >= FAMILY_SIMILARITY and (best is None or when > best[0]):
                    best = (when, other)
                break  # the latest one sharing this key is the candidate for it
        family[f.id] = family[best[1]] if best is not None else f.id
        for key in mine:
            by_key.setdefault(key, []).append((f.when, f.id))
    sizes: dict[int, int] = {}
    for fam in family.values():
        sizes[fam] = sizes.get(fam, 0) + 1
    return {hid: fam for hid, fam in family.items() if sizes[fam] > 1}


# --- storing ---------------------------------------------------------------------------------------


def rerank(ws: Workspace, db: sqlite_utils.Database, ids: Iterable[int] | None = None) -> RankReport:
    """Rank every hypothesis (ids None: and regroup the families) or only `ids`; one transaction."""
    started = time.perf_counter()
    target = target_of(ws, db)
    wanted = None if ids is None else list(ids)
    updates: list[tuple[float, str, int]] = []
    kept: list[Facts] = []
    for f in read_facts(ws, db, wanted):
        score, why = rank_of(f, target)
        updates.append((score, json.dumps(why, separators=(",", ":")), f.id))
        if wanted is None and f.fork_commit:
            f.claims, f.areas = [], []  # only what grouping needs stays in memory
            kept.append(f)
    report = RankReport(ranked=len(updates))
    with transaction(db):
        store.set_ranks(db, updates)
        if wanted is None:
            grouped = families(kept)
            store.set_families(db, grouped)
            report.families = len(set(grouped.values()))
            report.in_families = len(grouped)
    report.seconds = time.perf_counter() - started
    return report


def explain(why: dict[str, Any]) -> list[str]:
    """The stored reasons as lines: `backend  25.0/25  touches cpu files only`."""
    out = []
    for part in why.get("parts", []):
        if isinstance(part, dict):
            name, points, top = part.get("name", "?"), part.get("points", 0), part.get("max", 0)
            out.append(f"{name:8} {points:5.1f}/{top:<3g} {part.get('why', '')}")
    return out


def summary(why: dict[str, Any], width: int = 60) -> str:
    """The two parts that weigh most, in one line: `backend 25 (cpu only); claim 20 (+30% tg)`."""
    parts = [p for p in why.get("parts", []) if isinstance(p, dict)]
    parts.sort(key=lambda p: -float(p.get("points", 0)))
    text = "; ".join(f"{p.get('name')} {float(p.get('points', 0)):g}: {p.get('why', '')}" for p in parts[:2])
    return text if len(text) <= width else text[: width - 1] + "…"
