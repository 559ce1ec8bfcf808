"""Storing papers as citable evidence: each input all or nothing, a paper already there found by any
of its keys (kb.migrations m013 `paper_keys`: every address it was met at or names, its DOI, arXiv
id and title) or its text; and listing what is stored. A PDF and the web page of the same paper
are one paper: the page names its PDF (`citation_pdf_url`), they share a DOI or arXiv id, or their
titles are the same words (five or more)."""

from __future__ import annotations

import json
import re
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
    PDF_SUFFIX,
    ArxivRef,
    Fetched,
    decode_html,
    fetch,
    is_pdf,
    is_url,
    normalise_url,
    parse_arxiv,
    read_file,
)
from kb.papers.parsing import Extracted, extract


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


TITLE_KEY_WORDS = 5
"""A title of at least this many words identifies a paper (its PDF and its web page are one)."""


def title_key(title: str | None) -> str | None:
    """A title as a key: its words in lower case; None for a title too short to tell papers apart."""
    words = re.findall(r"\w+", (title or "").lower())
    return " ".join(words) if len(words) >= TITLE_KEY_WORDS else None


@dataclass(frozen=True)
class PaperKeys:
    """What a paper is known by: any one of them found in the knowledge base is the same paper."""

    urls: tuple[str, ...] = ()
    doi: str | None = None
    arxiv_id: str | None = None
    title: str | None = None

    def rows(self) -> list[tuple[str, str]]:
        found = [("url", u) for u in dict.fromkeys(self.urls) if u]
        found += [("doi", self.doi.lower())] if self.doi else []
        found += [("arxiv", self.arxiv_id)] if self.arxiv_id else []
        key = title_key(self.title)
        found += [("title", key)] if key else []
        return found

    def merged(self, other: PaperKeys) -> PaperKeys:
        return PaperKeys(
            (*self.urls, *other.urls),
            self.doi or other.doi,
            self.arxiv_id or other.arxiv_id,
            self.title or other.title,
        )


def known_paper(
    db: sqlite_utils.Database, keys: PaperKeys, content_hash: str | None = None
) -> dict[str, Any] | None:
    """The paper (id, title) any of `keys` (or the extracted text's hash) already names, or None."""
    for kind, value in keys.rows():
        found = one(
            db,
            "SELECT s.id, s.title FROM paper_keys k JOIN sources s ON s.id = k.source_id "
            "WHERE k.kind = ? AND k.value = ? ORDER BY s.id LIMIT 1",
            [kind, value],
        )
        if found:
            return found
    for value in dict.fromkeys(u for u in keys.urls if u):
        found = one(
            db,
            "SELECT id, title FROM sources WHERE kind = 'paper' AND (canonical_url = ? OR url = ?)",
            [value, value],
        )
        if found:
            return found
    if keys.arxiv_id:
        found = one(
            db, "SELECT id, title FROM sources WHERE kind = 'paper' AND arxiv_id = ?", [keys.arxiv_id]
        )
        if found:
            return found
    if content_hash:
        return one(
            db, "SELECT id, title FROM sources WHERE kind = 'paper' AND content_hash = ?", [content_hash]
        )
    return None


def _normalised(url: str) -> str:
    try:
        return normalise_url(url) if is_url(url) else url
    except UserError:
        return url


def _fetch_arxiv(arxiv: ArxivRef, label: str, settings: KBSettings, notes: list[str]) -> Fetched:
    """arXiv's HTML version, else (HTTP 404: none was made) its PDF."""
    html_url = arxiv.html_url(settings.arxiv_base)
    try:
        return fetch(html_url, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
    except UserError as exc:
        if "HTTP 404" not in str(exc):
            raise
    notes.append(f"arXiv {arxiv.id} has no HTML version (HTTP 404 at {html_url}): read its PDF")
    pdf_url = arxiv.pdf_url(settings.arxiv_base)
    try:
        return fetch(pdf_url, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
    except UserError as exc:
        raise UserError(f"{label}: arXiv {arxiv.id} has no HTML version, and its PDF failed: {exc}") from None


def _read(fetched: Fetched, label: str, settings: KBSettings, notes: list[str]) -> Extracted:
    """The paper's text and metadata, from HTML (trafilatura) or a PDF (kb/papers/pdf.py)."""
    if is_pdf(fetched.content_type, fetched.data[:8192]):
        from kb.papers.pdf import extract_pdf

        return extract_pdf(
            fetched.data,
            label,
            passage_chars=settings.passage_chars,
            seconds=settings.pdf_seconds,
            memory_mb=settings.pdf_memory_mb,
        )
    html, decode_notes = decode_html(fetched.data, fetched.charset, label)
    notes.extend(decode_notes)
    page_url = fetched.url if fetched.url.startswith(("http://", "https://")) else None
    return extract(html, page_url, label, passage_chars=settings.passage_chars)


def add_paper(
    db: sqlite_utils.Database,
    location: str,
    settings: KBSettings,
    *,
    known: PaperKeys | None = None,
    fetched: Fetched | None = None,
) -> PaperResult:
    """Ingest one URL or file (HTML or PDF). Bad input raises UserError and leaves the database
    unchanged. `known`: what a discovery source already said about the paper (DOI, arXiv id,
    title, other addresses), checked before anything is fetched and kept as its keys. `fetched`:
    the page, already read by the caller (kb/papers/follow.py reads its links too)."""
    arxiv = parse_arxiv(location) if is_url(location) or location.lower().startswith("arxiv") else None
    if is_url(location) or arxiv:
        given = arxiv.canonical_url if arxiv else normalise_url(location)
        label = location
    else:
        path = Path(location).expanduser()
        given = str(path.resolve())
        label = str(path)
    keys = PaperKeys((given, location), arxiv_id=arxiv.id if arxiv else None)
    if known is not None:
        keys = keys.merged(known)
        arxiv = arxiv or (parse_arxiv(f"arXiv:{known.arxiv_id}") if known.arxiv_id else None)
    found = known_paper(db, keys)
    if found:
        return _already_there(location, label, found, [])
    notes: list[str] = []
    if fetched is not None:
        pass
    elif arxiv:
        fetched = _fetch_arxiv(arxiv, label, settings, notes)
    elif is_url(location):
        fetched = fetch(location, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
    else:
        fetched = read_file(Path(location).expanduser(), max_bytes=settings.max_page_bytes)
    extracted = _read(fetched, label, settings, notes)
    page_url = fetched.url if fetched.url.startswith(("http://", "https://")) else None
    if arxiv:
        extracted.canonical_url = arxiv.canonical_url
    canonical = extracted.canonical_url or (normalise_url(fetched.url) if page_url else fetched.url)
    keys = keys.merged(
        PaperKeys(
            (canonical, _normalised(fetched.url), *(_normalised(u) for u in extracted.alternates)),
            extracted.doi,
            None,
            extracted.title,
        )
    )
    created = now()
    with transaction(db):
        # Checked again under the write lock: another process may have added it meanwhile.
        found = known_paper(db, keys, extracted.content_hash)
        if found:
            return _already_there(location, label, found, notes)
        source_id = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "url": location if arxiv else given,
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
                    **({"doi": extracted.doi} if extracted.doi else {}),
                    **({"pages": extracted.pages} if extracted.pages else {}),
                },
                "created_at": created,
                "updated_at": created,
            },
        )
        db.conn.executemany(
            "INSERT INTO evidence (source_id, kind, ref, title, section, position, body, meta, created_at) "
            "VALUES (?, 'passage', ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    source_id,
                    str(p.position),
                    extracted.title,
                    p.section,
                    p.position,
                    p.text,
                    json.dumps({"pages": list(p.pages)}) if p.pages else None,
                    created,
                )
                for p in extracted.passages
            ],
        )
        db.conn.executemany(
            "INSERT OR IGNORE INTO paper_keys (source_id, kind, value) VALUES (?, ?, ?)",
            [(source_id, kind, value) for kind, value in keys.rows()],
        )
        kind = f"PDF, {extracted.pages} pages, " if extracted.pages else ""
        message = f"added paper {source_id}: {extracted.title} ({kind}{len(extracted.passages)} passages)"
        log_event(db, "kb.paper", message, data={"source_id": source_id, "input": location})
    return PaperResult(
        location,
        "added",
        message,
        source_id=source_id,
        title=extracted.title,
        passages=len(extracted.passages),
        notes=notes,
    )


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """URLs as given; folders become the .html and .pdf files under them (sorted); files as given."""
    out: list[str] = []
    for item in inputs:
        if is_url(item) or parse_arxiv(item):
            out.append(item)
            continue
        path = Path(item).expanduser()
        if path.is_dir():
            suffixes = (*HTML_SUFFIXES, PDF_SUFFIX)
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
            if not found:
                raise UserError(f"{item}: no .html or .pdf files in this folder")
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
