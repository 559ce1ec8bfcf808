"""Full-text search over all evidence (paper passages, fork commits and files, fusions and gaps, notes).

The typed API the CLI, the TUI and the LLM research phase call:

    hits = search(db, "ggml_can_fuse", kind="commit", limit=20)
    item = get_evidence(db, hits[0].id)

User queries never reach FTS5 syntax raw: every word becomes a quoted FTS string, so identifiers
(`ggml_can_fuse`, `Q4_0_8x8`), punctuation (`RMS_NORM+MUL`) and any script are matched literally,
and a stray quote or bracket cannot raise a syntax error. Supported on top of plain words:
"a phrase", a trailing `*` for a prefix, and `OR` (upper case) between two terms.

Two indexes, searched in turn: the exact one (whole identifiers and words, `evidence_fts`), then the
one that forgives word forms (`evidence_stem_fts`: English stems by the porter tokenizer, identifiers
split into their parts, Russian words matched by their snowball stem as a prefix). Exact hits always
come first; hits only the second index finds follow (`match = "stem"`), so `repack` also finds
`repacked` and `repacking`, `rms_norm` finds `ggml_compute_forward_rms_norm`, `умножение` finds
`умножения`.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import sqlite_utils

from kb.db import one, rows
from kb.errors import UserError
from kb.jsoncol import decoded, decoded_dict

SearchKind = Literal["paper", "commit", "fusion", "note"]
SEARCH_KINDS: tuple[str, ...] = ("paper", "commit", "fusion", "note")

# Evidence kinds behind each search kind (fusion covers the whole inventory: fusions, gaps, single ops;
# commit covers what forks give: their commits, and their files in file-level mode).
_EVIDENCE_KINDS: dict[str, tuple[str, ...]] = {
    "paper": ("passage",),
    "commit": ("commit", "fork_file"),
    "fusion": ("fusion", "gap", "single_op"),
    "note": ("note",),
}
_SEARCH_KIND_OF = {ev: kind for kind, evs in _EVIDENCE_KINDS.items() for ev in evs}

# bm25 column weights (title, section, body, kind): a title or heading hit says more than a body hit;
# kind only filters.
_WEIGHTS = (4.0, 2.0, 1.0, 0.0)
RANK_WINDOW = 10_000
_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_WORD_CHAR = re.compile(r"\w", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_CYRILLIC_WORD = re.compile(r"^[\u0400-\u04ff]+$")
MIN_STEM = 3
"""A Russian stem shorter than this is matched as the whole word (a short prefix matches too much)."""
MAX_LIMIT = 1000


@dataclass(frozen=True)
class SearchHit:
    id: int
    """The evidence id to cite."""
    kind: str
    """paper (a passage), commit, fusion (fusion, gap or single op), note."""
    evidence_kind: str
    title: str
    section: str | None
    snippet: str
    """Matching text with the matched terms between the `marks` given to search()."""
    score: float
    """-bm25: higher is better; only comparable within one query."""
    source_id: int
    source: str
    """The paper title, fork name or inventory label the evidence belongs to."""
    ref: str
    """passage number, commit sha or fusion key within the source."""
    position: int | None
    match: str = "exact"
    """exact (whole words and identifiers), or stem (found by a word form or an identifier's part;
    ranked after every exact hit)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """One evidence item in full, with its source and, for commits, the commit record."""

    id: int
    kind: str
    evidence_kind: str
    ref: str
    title: str
    section: str | None
    position: int | None
    body: str
    meta: dict[str, Any]
    source: dict[str, Any]
    commit: dict[str, Any] | None = None
    fusion: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _yo_variants(text: str) -> list[str]:
    """Russian writes ё as е more often than not, and unicode61 does not fold them: a term matches
    either spelling (ё -> е everywhere; or one е -> ё at a time, as a word rarely has two ё)."""
    variants = [text]
    if "ё" in text or "Ё" in text:
        variants.append(text.replace("ё", "е").replace("Ё", "Е"))
    else:
        for index, char in enumerate(text):
            if char in "еЕ" and len(variants) <= 12:
                variants.append(text[:index] + ("ё" if char == "е" else "Ё") + text[index + 1 :])
    return variants


def _term(text: str, prefix: bool) -> str:
    star = " *" if prefix else ""
    return " OR ".join(_quote(variant) + star for variant in _yo_variants(text))


def _russian_stem(word: str) -> str:
    import snowballstemmer  # pure Python; only a search with a Cyrillic word pays for the import

    return str(snowballstemmer.stemmer("russian").stemWord(word.lower()))


def _stem_term(text: str, prefix: bool) -> str:
    """A term for the word-form index: Russian words by their stem and any ending; the rest as given
    (the porter tokenizer stems English words and splits identifiers at `_` on both sides)."""
    if _CYRILLIC_WORD.match(text):
        stem = _russian_stem(text)
        if len(stem) >= MIN_STEM:
            return _term(stem, True)
    return _term(text, prefix)


def _stem_phrase(text: str) -> str:
    """A phrase for the word-form index: with Russian words in it, each word by its stem (adjacency
    is not kept: FTS5 phrases take no prefix but the last); else the phrase as given."""
    words = text.split()
    if len(words) > 1 and _CYRILLIC.search(text):
        return " AND ".join(f"({_stem_term(w, False)})" for w in words if _WORD_CHAR.search(w))
    return _stem_term(text, False)


def _expression(query: str, stems: bool) -> str:
    """The FTS5 expression: groups of terms joined by OR, the groups ANDed. A term or a group given
    again adds nothing to what matches, and FTS5 pays for each phrase of a row again in bm25 (a
    thousand `t*` took minutes): each is kept once, so the cost grows with the distinct terms."""
    groups: list[list[str]] = []
    pending_or = False
    for match in _TOKEN.finditer(query):
        phrase, word = match.group(1), match.group(2)
        if word == "OR":
            pending_or = bool(groups)
            continue
        text = phrase if phrase is not None else word
        prefix = False
        if phrase is None and text.endswith("*"):
            text, prefix = text.rstrip("*"), True
        if not _WORD_CHAR.search(text):
            continue  # pure punctuation: nothing the tokenizer would index
        if not stems:
            term = _term(text, prefix)
        elif phrase is not None:
            term = _stem_phrase(text)
        else:
            term = _stem_term(text, prefix)
        if pending_or and groups:
            groups[-1].append(term)
        else:
            groups.append([term])
        pending_or = False
    parts = list(dict.fromkeys(" OR ".join(dict.fromkeys(group)) for group in groups))
    if not parts:
        raise UserError(f"{query!r}: nothing to search for (give at least one word)")
    expression = " AND ".join(f"({p})" if " OR " in p or " AND " in p else p for p in parts)
    # Only the text columns: the indexed `kind` column is for filtering, never for matching words.
    return f"{{title section body}} : ({expression})"


def fts_query(query: str) -> str:
    """Turn a user query into a safe FTS5 expression (terms ANDed, phrases kept, `OR` honoured)."""
    return _expression(query, stems=False)


def stem_query(query: str) -> str:
    """The same query for the word-form index (evidence_stem_fts): Russian words as stem prefixes."""
    return _expression(query, stems=True)


def _kind_filter(kind: str | None) -> str:
    if kind is None:
        return ""
    if kind not in _EVIDENCE_KINDS:
        raise UserError(f"{kind}: unknown kind (choose from {', '.join(SEARCH_KINDS)})")
    return " AND kind : (" + " OR ".join(_quote(k) for k in _EVIDENCE_KINDS[kind]) + ")"


def search(
    db: sqlite_utils.Database,
    query: str,
    kind: str | None = None,
    limit: int = 20,
    *,
    marks: tuple[str, str] = ("**", "**"),
    snippet_tokens: int = 24,
) -> list[SearchHit]:
    """Rank evidence by bm25 for `query` and return the best `limit` hits with highlighted snippets:
    the exact hits first, then those only a word form or an identifier's part finds.

    When more than RANK_WINDOW items match (a very common word), the newest RANK_WINDOW matches are
    ranked: bm25 costs a lookup per match, and this keeps any query within tens of milliseconds.
    """
    if limit < 1 or limit > MAX_LIMIT:
        raise UserError(f"--limit {limit}: must be between 1 and {MAX_LIMIT}")
    kinds = _kind_filter(kind)
    exact, stems = fts_query(query), stem_query(query)
    try:
        # Rank first and fetch only ids: snippet() is costly, so it runs on the top `limit` rows only.
        ranked = [(i, score, "exact") for i, score in _rank(db, "evidence_fts", exact + kinds, limit)]
        if len(ranked) < limit:
            seen = {i for i, _, _ in ranked}
            more = _rank(db, "evidence_stem_fts", stems + kinds, limit + len(seen))
            ranked += [(i, score, "stem") for i, score in more if i not in seen][: limit - len(ranked)]
        if not ranked:
            return []
        ids = [i for i, _, _ in ranked]
        snippets: dict[int, str] = {}
        for table, expression, tier in (
            ("evidence_fts", exact, "exact"),
            ("evidence_stem_fts", stems, "stem"),
        ):
            chosen = [i for i, _, m in ranked if m == tier]
            snippets |= _snippets(db, table, expression, chosen, marks, snippet_tokens)
    except sqlite3.OperationalError as exc:
        raise UserError(f"{query!r}: cannot search ({exc})") from None
    placeholders = ", ".join("?" for _ in ids)
    details = {
        r["id"]: r
        for r in rows(
            db,
            f"SELECT e.id, e.kind, e.ref, e.title, e.section, e.position, e.source_id, "
            f"coalesce(s.title, s.name, s.url, '') AS source FROM evidence e "
            f"JOIN sources s ON s.id = e.source_id WHERE e.id IN ({placeholders})",
            ids,
        )
    }
    hits: list[SearchHit] = []
    for rowid, score, match in ranked:
        row = details.get(int(rowid))
        if row is None:  # deleted between the two queries
            continue
        hits.append(
            SearchHit(
                id=row["id"],
                kind=_SEARCH_KIND_OF.get(row["kind"], row["kind"]),
                evidence_kind=row["kind"],
                title=row["title"] or "",
                section=row["section"],
                snippet=snippets.get(row["id"], ""),
                score=round(-float(score), 4),
                source_id=row["source_id"],
                source=row["source"],
                ref=row["ref"],
                position=row["position"],
                match=match,
            )
        )
    return hits


def _rank(db: sqlite_utils.Database, table: str, expression: str, limit: int) -> list[tuple[int, float]]:
    """(id, bm25) of the best `limit` matches among the newest RANK_WINDOW, best first."""
    weights = ", ".join(str(w) for w in _WEIGHTS)
    found = db.execute(
        f"SELECT id, score FROM (SELECT rowid AS id, bm25({table}, {weights}) AS score "
        f"FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?) ORDER BY score LIMIT ?",
        [expression, RANK_WINDOW, limit],
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in found]


def _snippets(
    db: sqlite_utils.Database,
    table: str,
    expression: str,
    ids: list[int],
    marks: tuple[str, str],
    tokens: int,
) -> dict[int, str]:
    if not ids:
        return {}
    placeholders = ", ".join("?" for _ in ids)
    return {
        int(r[0]): str(r[1])
        for r in db.execute(
            f"SELECT rowid, snippet({table}, -1, ?, ?, '…', ?) FROM {table} "
            f"WHERE {table} MATCH ? AND rowid IN ({placeholders})",
            [marks[0], marks[1], tokens, expression, *ids],
        ).fetchall()
    }


_COMMIT_JSON = ("files", "binary_files", "backends", "areas", "claims")
"""The commits columns that hold JSON."""


def get_evidence(db: sqlite_utils.Database, evidence_id: int) -> Evidence:
    """One evidence item in full (for `kb show`, the TUI detail pane and LLM prompts)."""
    row = one(db, "SELECT * FROM evidence WHERE id = ?", [evidence_id])
    if row is None:
        raise UserError(f"evidence {evidence_id}: no such evidence id")
    source = one(
        db,
        "SELECT id, kind, name, url, canonical_url, arxiv_id, title, authors, published, site, "
        "language, ref, commit_sha, merge_base FROM sources WHERE id = ?",
        [row["source_id"]],
    )
    assert source is not None
    source = {k: v for k, v in source.items() if v is not None}
    commit = one(db, "SELECT * FROM commits WHERE evidence_id = ?", [evidence_id])
    if commit is not None:
        commit = {k: decoded(v) if k in _COMMIT_JSON else v for k, v in commit.items() if k != "evidence_id"}
        commit["upstreamed"] = bool(commit["upstreamed"])
        commit["diff_truncated"] = bool(commit["diff_truncated"])
    fusion = one(db, "SELECT * FROM fusions WHERE evidence_id = ?", [evidence_id])
    if fusion is not None:
        fusion = {k: v for k, v in fusion.items() if k != "evidence_id"}
    files = [
        r["path"]
        for r in rows(db, "SELECT path FROM commit_files WHERE evidence_id = ? ORDER BY path", [evidence_id])
    ]
    meta = decoded_dict(row["meta"])
    return Evidence(
        id=row["id"],
        kind=_SEARCH_KIND_OF.get(row["kind"], row["kind"]),
        evidence_kind=row["kind"],
        ref=row["ref"],
        title=row["title"] or "",
        section=row["section"],
        position=row["position"],
        body=row["body"],
        meta=meta if isinstance(meta, dict) else {"value": meta},
        source=source,
        commit=commit,
        fusion=fusion,
        files=files,
    )


@dataclass(frozen=True)
class Stats:
    evidence: dict[str, int]
    """Evidence count per evidence kind (passage, commit, fusion, gap, single_op, note)."""
    sources: dict[str, int]
    """Source count per kind (paper, fork, inventory, note)."""
    db_bytes: int
    """Database size on disk, write-ahead log included."""
    db_path: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stats(db: sqlite_utils.Database) -> Stats:
    evidence = {r[0]: int(r[1]) for r in db.execute("SELECT kind, count(*) FROM evidence GROUP BY kind")}
    sources = {r[0]: int(r[1]) for r in db.execute("SELECT kind, count(*) FROM sources GROUP BY kind")}
    path = ""
    size = 0
    for row in db.execute("PRAGMA database_list").fetchall():
        if row[1] == "main":
            path = str(row[2])
    if path:
        from pathlib import Path

        for suffix in ("", "-wal"):
            file = Path(path + suffix)
            if file.exists():
                size += file.stat().st_size
    else:
        page_count = db.execute("PRAGMA page_count").fetchone()[0]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        size = int(page_count) * int(page_size)
    return Stats(evidence=evidence, sources=sources, db_bytes=size, db_path=path)
