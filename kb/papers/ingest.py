"""Storing papers as citable evidence: each input all or nothing, a paper already there found by its
URL, canonical URL, arXiv id or text; and listing what is stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import sqlite_utils

from kb.config import KBSettings
from kb.db import insert, log_event, now, one, rows, transaction
from kb.errors import UserError
from kb.papers.fetching import (
    HTML_SUFFIXES,
    decode_html,
    fetch,
    is_url,
    normalise_url,
    parse_arxiv,
    read_file,
)
from kb.papers.parsing import extract


@dataclass(frozen=True)
class PaperResult:
    input: str
    status: Literal["added", "exists", "error"]
    message: str
    source_id: int | None = None
    title: str | None = None
    passages: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Paper:
    id: int
    title: str
    url: str
    canonical_url: str | None
    arxiv_id: str | None
    authors: str | None
    published: str | None
    site: str | None
    language: str | None
    passages: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _already_there(location: str, label: str, found: dict[str, Any], notes: list[str]) -> PaperResult:
    return PaperResult(
        location,
        "exists",
        f"{label}: already in the knowledge base (paper {found['id']}: {found['title']})",
        source_id=found["id"],
        title=found["title"],
        notes=notes,
    )


def _existing(
    db: sqlite_utils.Database,
    *,
    urls: Sequence[str] = (),
    arxiv_id: str | None = None,
    content_hash: str | None = None,
) -> dict[str, Any] | None:
    for value in dict.fromkeys(u for u in urls if u):
        found = one(
            db,
            "SELECT id, title FROM sources WHERE kind = 'paper' AND (canonical_url = ? OR url = ?)",
            [value, value],
        )
        if found:
            return found
    if arxiv_id:
        found = one(db, "SELECT id, title FROM sources WHERE kind = 'paper' AND arxiv_id = ?", [arxiv_id])
        if found:
            return found
    if content_hash:
        return one(
            db, "SELECT id, title FROM sources WHERE kind = 'paper' AND content_hash = ?", [content_hash]
        )
    return None


def add_paper(db: sqlite_utils.Database, location: str, settings: KBSettings) -> PaperResult:
    """Ingest one URL or HTML file. Bad input raises UserError and leaves the database unchanged."""
    arxiv = parse_arxiv(location) if is_url(location) or location.lower().startswith("arxiv") else None
    if is_url(location) or arxiv:
        given = arxiv.canonical_url if arxiv else normalise_url(location)
        label = location
    else:
        path = Path(location).expanduser()
        given = str(path.resolve())
        label = str(path)
    found = _existing(db, urls=[given, location], arxiv_id=arxiv.id if arxiv else None)
    if found:
        return _already_there(location, label, found, [])
    if arxiv:
        fetch_url = arxiv.html_url(settings.arxiv_base)
        try:
            fetched = fetch(fetch_url, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
        except UserError as exc:
            if "HTTP 404" in str(exc):
                raise UserError(
                    f"{label}: arXiv {arxiv.id} has no HTML version (HTTP 404 at {fetch_url}); "
                    "PDFs are not supported"
                ) from None
            raise
    elif is_url(location):
        fetched = fetch(location, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
    else:
        fetched = read_file(Path(location).expanduser(), max_bytes=settings.max_page_bytes)
    html, notes = decode_html(fetched.data, fetched.charset, label)
    page_url = fetched.url if fetched.url.startswith(("http://", "https://")) else None
    extracted = extract(html, page_url, label, passage_chars=settings.passage_chars)
    if arxiv:
        extracted.canonical_url = arxiv.canonical_url
    canonical = extracted.canonical_url or (normalise_url(fetched.url) if page_url else fetched.url)
    created = now()
    with transaction(db):
        # Checked again under the write lock: another process may have added it meanwhile.
        found = _existing(
            db,
            urls=[canonical, given],
            arxiv_id=arxiv.id if arxiv else None,
            content_hash=extracted.content_hash,
        )
        if found:
            return _already_there(location, label, found, notes)
        source_id = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "url": given if not arxiv else location,
                "canonical_url": canonical,
                "arxiv_id": arxiv.id if arxiv else None,
                "title": extracted.title,
                "authors": extracted.authors,
                "published": extracted.published,
                "site": extracted.site,
                "language": extracted.language,
                "content_hash": extracted.content_hash,
                "meta": {
                    "fetched_url": fetched.url,
                    "content_type": fetched.content_type,
                    "bytes": len(fetched.data),
                    "notes": notes,
                },
                "created_at": created,
                "updated_at": created,
            },
        )
        db.conn.executemany(
            "INSERT INTO evidence (source_id, kind, ref, title, section, position, body, created_at) "
            "VALUES (?, 'passage', ?, ?, ?, ?, ?, ?)",
            [
                (source_id, str(p.position), extracted.title, p.section, p.position, p.text, created)
                for p in extracted.passages
            ],
        )
        log_event(
            db,
            "kb.paper",
            f"added paper {source_id}: {extracted.title} ({len(extracted.passages)} passages)",
            data={"source_id": source_id, "input": location},
        )
    return PaperResult(
        location,
        "added",
        f"added paper {source_id}: {extracted.title} ({len(extracted.passages)} passages)",
        source_id=source_id,
        title=extracted.title,
        passages=len(extracted.passages),
        notes=notes,
    )


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """URLs as given; folders become the .html files under them (sorted); files as given."""
    out: list[str] = []
    for item in inputs:
        if is_url(item) or parse_arxiv(item):
            out.append(item)
            continue
        path = Path(item).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in HTML_SUFFIXES)
            if not found:
                raise UserError(f"{item}: no .html files in this folder")
            out.extend(str(p) for p in found)
        elif path.exists():
            out.append(str(path))
        else:
            raise UserError(f"{item}: no such file or folder (and not an http(s) URL)")
    return out


def add_papers(
    db: sqlite_utils.Database,
    inputs: Sequence[str],
    settings: KBSettings,
    progress: Callable[[PaperResult], None] | None = None,
) -> list[PaperResult]:
    """Ingest each input on its own (one bad page does not stop a folder); errors become results."""
    results: list[PaperResult] = []
    for location in inputs:
        try:
            result = add_paper(db, location, settings)
        except UserError as exc:
            result = PaperResult(location, "error", str(exc))
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def list_papers(db: sqlite_utils.Database) -> list[Paper]:
    found = rows(
        db,
        "SELECT s.id, coalesce(s.title, '') AS title, s.url, s.canonical_url, s.arxiv_id, s.authors, "
        "s.published, s.site, s.language, s.created_at, "
        "(SELECT count(*) FROM evidence e WHERE e.source_id = s.id AND e.kind = 'passage') AS passages "
        "FROM sources s WHERE s.kind = 'paper' ORDER BY s.id",
    )
    return [Paper(**row) for row in found]
