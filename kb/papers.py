"""Papers and articles: fetch (or read) HTML, extract the article with trafilatura, split it into
passages that keep their heading and position, and store them as citable evidence.

    results = add_papers(db, ["https://arxiv.org/abs/2401.00001", "notes/"], ws.settings.kb)

Each input is all or nothing: a bad input (unreachable, not HTML, too big, undecodable, no text)
raises a one-line UserError and writes nothing. Re-adding a paper (same URL, same canonical URL,
same arXiv id, or the same extracted text) changes nothing and says "already in the knowledge base".

Encoding policy: a BOM wins; then the declared charset (HTTP header, then <meta>); a page declared
as something else that is valid UTF-8 with non-ASCII bytes is read as UTF-8 (the usual mislabel),
and bytes invalid in the declared charset are read as UTF-8 if they are valid UTF-8. Both cases are
reported as a note. Text that is valid in neither, or undeclared and not UTF-8, is refused: guessing
would index garbage.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit, urlunsplit

import sqlite_utils

from kb.config import KBSettings
from kb.db import insert, log_event, now, one, rows, transaction
from kb.errors import UserError

USER_AGENT = "autoresearch-kb/0.1 (+https://github.com/; literature ingestion)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")

_ARXIV = re.compile(
    r"^(?:https?://)?(?:www\.|export\.)?arxiv\.org/(?P<kind>abs|html|pdf)/"
    r"(?P<id>\d{4}\.\d{4,5}|[a-z][a-z.-]*/\d{7})(?P<version>v\d+)?(?:\.pdf)?/?(?:[?#].*)?$",
    re.IGNORECASE,
)
_ARXIV_ID = re.compile(r"^arxiv:(?P<id>\d{4}\.\d{4,5}|[a-z][a-z.-]*/\d{7})(?P<version>v\d+)?$", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_HTML_SNIFF = re.compile(
    rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b",
    re.IGNORECASE | re.DOTALL,
)
_HTML_LANG = re.compile(r"<html[^>]*\blang\s*=\s*[\"']?([A-Za-z]{2,3})", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?。…])\s+")


# --- results --------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Passage:
    section: str | None
    position: int
    text: str


@dataclass
class Extracted:
    title: str
    authors: str | None
    published: str | None
    site: str | None
    canonical_url: str | None
    language: str | None
    passages: list[Passage]
    content_hash: str


@dataclass(frozen=True)
class Fetched:
    url: str
    """The final URL, after redirects."""
    content_type: str
    charset: str | None
    data: bytes


@dataclass(frozen=True)
class ArxivRef:
    id: str
    version: str

    @property
    def canonical_url(self) -> str:
        return f"https://arxiv.org/abs/{self.id}"

    def html_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/html/{self.id}{self.version}"


def parse_arxiv(location: str) -> ArxivRef | None:
    """arxiv.org/abs|html|pdf/ID[vN][.pdf] or arXiv:ID -> the paper's id (one paper whatever the link)."""
    match = _ARXIV.match(location.strip()) or _ARXIV_ID.match(location.strip())
    if not match:
        return None
    return ArxivRef(id=match.group("id"), version=match.group("version") or "")


def is_url(location: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location))


def normalise_url(url: str) -> str:
    """Comparable form of a URL: lower-case scheme and host, no fragment, no default port.
    A malformed one (`http://[::1`, port 99999) is a UserError naming it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UserError(f"{url}: not a valid URL ({exc})") from None
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets
    if port and not ((parts.scheme == "http" and port == 80) or (parts.scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    path = parts.path or "/"
    return urlunsplit((parts.scheme.lower(), host, path, parts.query, ""))


# --- fetching -------------------------------------------------------------------------------------


def _refuse_type(label: str, content_type: str, head: bytes) -> None:
    """Raise unless the content is HTML (by type, or sniffed when the type is missing or generic)."""
    if head.startswith(b"%PDF") or content_type == "application/pdf":
        raise UserError(
            f"{label}: a PDF, not an HTML page (only HTML is supported; for arXiv give the abs or html link)"
        )
    if content_type in HTML_TYPES:
        if b"\x00" in head[:8192] and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise UserError(f"{label}: binary content labelled {content_type}, not an HTML page")
        return
    if content_type in ("", "application/octet-stream") and _HTML_SNIFF.match(head[:4096]):
        return
    kind = content_type or "unknown type"
    if b"\x00" in head[:8192] or content_type.startswith(("image/", "audio/", "video/", "font/")):
        raise UserError(f"{label}: not HTML ({kind}, binary content)")
    raise UserError(f"{label}: not HTML ({kind})")


def fetch(url: str, *, timeout: float, max_bytes: int) -> Fetched:
    """GET an http(s) URL within one deadline and the size cap (kb.fetch: redirects checked hop by
    hop, a cut body refused), non-HTML refused from its first bytes before the rest is read."""
    from kb.fetch import get

    page = get(
        url,
        timeout=timeout,
        max_bytes=max_bytes,
        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1"},
        check_head=lambda content_type, head: _refuse_type(url, content_type, head),
    )
    return Fetched(url=page.url, content_type=page.content_type, charset=page.charset, data=page.data)


def read_file(path: Path, *, max_bytes: int) -> Fetched:
    """A regular HTML file, up to the size cap (a folder, a FIFO or a device is refused unread)."""
    from kb.files import read_regular_file

    label = str(path)
    data = read_regular_file(path, max_bytes=max_bytes, label=label)
    if not data.strip():
        raise UserError(f"{label}: empty file")
    declared = "text/html" if path.suffix.lower() in HTML_SUFFIXES else ""
    _refuse_type(label, declared, data[:8192])
    return Fetched(url=path.resolve().as_uri(), content_type=declared or "text/html", charset=None, data=data)


# --- decoding -------------------------------------------------------------------------------------


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip().strip("'\"")).name
    except LookupError:
        return None


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def decode_html(data: bytes, header_charset: str | None, label: str) -> tuple[str, list[str]]:
    """Bytes to text following the module's encoding policy; notes say when a label was wrong."""
    for bom, codec in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            try:
                return data.decode(codec), []
            except UnicodeDecodeError as exc:
                raise UserError(
                    f"{label}: invalid {codec} text after its byte-order mark (byte {exc.start})"
                ) from None
    meta = _META_CHARSET.search(data[:4096])
    declared_names = [n for n in (header_charset, meta.group(1).decode("ascii") if meta else None) if n]
    notes: list[str] = []
    declared: str | None = None
    for name in declared_names:
        declared = _codec(name)
        if declared:
            break
        notes.append(f"unknown charset {name!r} ignored")
    has_non_ascii = not data.isascii()
    if declared is None:
        try:
            return data.decode("utf-8"), notes
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{label}: not valid UTF-8 (byte {exc.start}) and no charset declared; "
                "refusing to guess the encoding"
            ) from None
    if declared != "utf-8" and not declared.startswith("utf-16") and has_non_ascii and _valid_utf8(data):
        notes.append(f"declared charset {declared} but the bytes are UTF-8: read as UTF-8")
        return data.decode("utf-8"), notes
    try:
        return data.decode(declared), notes
    except UnicodeDecodeError as exc:
        if declared != "utf-8" and _valid_utf8(data):
            notes.append(f"invalid {declared} (byte {exc.start}) but valid UTF-8: read as UTF-8")
            return data.decode("utf-8"), notes
        raise UserError(f"{label}: invalid {declared} text (byte {exc.start}) and not UTF-8 either") from None


# --- extraction -----------------------------------------------------------------------------------


def _text(element: Any) -> str:
    """Text of an element with its line breaks (<lb/>) kept and runs of spaces collapsed."""
    pieces: list[str] = []

    def walk(node: Any) -> None:
        if node.tag == "lb":
            pieces.append("\n")
        elif node.text:
            pieces.append(node.text)
        for child in node:
            walk(child)
            if child.tail:
                pieces.append(child.tail)

    walk(element)
    lines = (" ".join(line.split()) for line in "".join(pieces).split("\n"))
    return "\n".join(line for line in lines if line)


def _verbatim(element: Any) -> str:
    return "".join(element.itertext()).strip("\n")


def _blocks(body: Any) -> Iterator[tuple[str, int, str]]:
    """(kind, level, text) for each block of trafilatura's body: heads, paragraphs, lists, code."""
    for element in body:
        tag = element.tag
        if not isinstance(tag, str):
            continue
        if tag == "head":
            rend = str(element.get("rend") or "h2")
            level = int(rend[1]) if len(rend) == 2 and rend[1].isdigit() else 2
            text = _text(element)
            if text:
                yield "head", level, text
        elif tag == "code":
            text = _verbatim(element)
            if text.strip():
                yield "code", 0, text
        elif tag == "list":
            items = [_text(item) for item in element if item.tag == "item"]
            text = "\n".join(f"- {item}" for item in items if item)
            if text:
                yield "text", 0, text
        elif tag == "table":
            lines = []
            for row in element.iter("row"):
                cells = [_text(cell) for cell in row if cell.tag == "cell"]
                if any(cells):
                    lines.append(" | ".join(cells))
            if lines:
                yield "text", 0, "\n".join(lines)
        elif tag in ("graphic", "ref"):
            continue
        elif tag in ("div", "section", "main", "doc"):
            yield from _blocks(element)
        else:
            text = _text(element)
            if text:
                yield "text", 0, text


def _split_long(text: str, limit: int, code: bool) -> list[str]:
    """Cut a block longer than `limit` at sentence (or, for code, line) boundaries."""
    if len(text) <= limit:
        return [text]
    units = text.split("\n") if code else _SENTENCE_END.split(text)
    joiner = "\n" if code else " "
    out: list[str] = []
    current = ""
    for unit in units:
        while len(unit) > limit:  # one enormous sentence or line: cut at a space if there is one
            cut = unit.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            if current:
                out.append(current)
                current = ""
            out.append(unit[:cut])
            unit = unit[cut:].lstrip()
        if current and len(current) + len(joiner) + len(unit) > limit:
            out.append(current)
            current = unit
        else:
            current = f"{current}{joiner}{unit}" if current else unit
    if current:
        out.append(current)
    return out


def split_passages(blocks: Sequence[tuple[str, int, str]], title: str, target: int) -> list[Passage]:
    """Group blocks into passages of about `target` characters that never cross a heading."""
    passages: list[Passage] = []
    headings: list[tuple[int, str]] = []
    buffer: list[str] = []
    size = 0
    limit = target * 3 // 2

    def section() -> str | None:
        return " > ".join(text for _, text in headings) or None

    def flush() -> None:
        nonlocal size
        if buffer:
            passages.append(Passage(section(), len(passages) + 1, "\n\n".join(buffer)))
            buffer.clear()
            size = 0

    for kind, level, text in blocks:
        if kind == "head":
            flush()
            if text.casefold() == title.casefold():
                continue  # the article's own title repeated as its first heading
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, text))
            continue
        for piece in _split_long(text, limit, kind == "code"):
            if buffer and size + len(piece) > target:
                flush()
            buffer.append(piece)
            size += len(piece) + 2
    flush()
    return passages


def _language(html: str, document: Any) -> str | None:
    match = _HTML_LANG.search(html[:4096])
    if match:
        return match.group(1).lower()
    language = getattr(document, "language", None)
    return str(language) if language else None


def _page_canonical(url: str | None, found: str | None) -> str | None:
    """The page's canonical link, normalised; None when it has none or a malformed or non-http one
    (a page's own link is a hint, not a reason to refuse the page)."""
    if not found:
        return None
    try:
        canonical = urljoin(url, found) if url else found
        if urlsplit(canonical).scheme not in ("http", "https"):
            return None
        return normalise_url(canonical)
    except (ValueError, UserError):
        return None


def extract(html: str, url: str | None, label: str, *, passage_chars: int = 1200) -> Extracted:
    """Article text and metadata with trafilatura (navigation, banners, sidebars, footers dropped).

    Text is read from trafilatura's XML tree, not its markdown, which escapes `_` and so would break
    identifiers such as `ggml_can_fuse` or `Q4_0_8x8`."""
    import trafilatura

    try:
        document = trafilatura.bare_extraction(
            html,
            url=url,
            with_metadata=True,
            include_comments=False,
            include_tables=True,
            include_formatting=False,
            include_images=False,
            include_links=False,
        )
    except Exception as exc:  # trafilatura raises assorted lxml/ValueError types on broken input
        raise UserError(f"{label}: cannot parse the page ({type(exc).__name__}: {exc})") from None
    body = getattr(document, "body", None) if document is not None else None
    blocks = list(_blocks(body)) if body is not None else []
    text_blocks = [b for b in blocks if b[0] != "head"]
    if not text_blocks:
        raise UserError(f"{label}: no extractable text (no article content found)")
    title = (getattr(document, "title", None) or "").strip()
    if not title:
        heads = [b[2] for b in blocks if b[0] == "head"]
        title = heads[0] if heads else (Path(urlsplit(url).path).name if url else label)
    passages = split_passages(blocks, title, passage_chars)
    full_text = "\n\n".join(p.text for p in passages)
    canonical = _page_canonical(url, getattr(document, "url", None))
    return Extracted(
        title=title,
        authors=(getattr(document, "author", None) or None),
        published=(getattr(document, "date", None) or None),
        site=(getattr(document, "sitename", None) or getattr(document, "hostname", None) or None),
        canonical_url=canonical,
        language=_language(html, document),
        passages=passages,
        content_hash=hashlib.sha256(" ".join(full_text.split()).encode()).hexdigest(),
    )


# --- storing --------------------------------------------------------------------------------------


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
