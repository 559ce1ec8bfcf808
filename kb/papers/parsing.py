"""From a page's HTML to the article: trafilatura extracts it (imported here, lazily: the CLI's
start-up path never pays for it), and it is split into passages that keep their heading and
position."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from kb.errors import UserError
from kb.papers.fetching import normalise_url

_HTML_LANG = re.compile(r"<html[^>]*\blang\s*=\s*[\"']?([A-Za-z]{2,3})", re.IGNORECASE)


MAX_HEAD_CHARS = 200_000
"""How much of a page is read for its <meta> tags (they sit in its head)."""


_SENTENCE_END = re.compile(r"(?<=[.!?。…])\s+")


@dataclass(frozen=True)
class Passage:
    section: str | None
    position: int
    text: str
    pages: tuple[int, int] | None = None
    """The first and last page it stands on (PDFs); None for a web page."""


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
    doi: str | None = None
    """The paper's DOI, when the page or the PDF names one (`citation_doi`, a DOI on page 1)."""
    alternates: list[str] = field(default_factory=list)
    """Other addresses of the same paper the page names (`citation_pdf_url`, `citation_abstract_html_url`)."""
    pages: int | None = None
    """A PDF's page count."""


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


def split_passages(
    blocks: Sequence[tuple[str, int, str]],
    title: str,
    target: int,
    *,
    pages: Sequence[tuple[int, int]] | None = None,
) -> list[Passage]:
    """Group blocks into passages of about `target` characters that never cross a heading.
    `pages` (one per block, a PDF's): each passage carries the pages of the blocks it holds."""
    passages: list[Passage] = []
    headings: list[tuple[int, str]] = []
    buffer: list[str] = []
    span: list[int] = []
    size = 0
    limit = target * 3 // 2

    def section() -> str | None:
        return " > ".join(text for _, text in headings) or None

    def flush() -> None:
        nonlocal size
        if buffer:
            where = (min(span), max(span)) if span else None
            passages.append(Passage(section(), len(passages) + 1, "\n\n".join(buffer), where))
            buffer.clear()
            span.clear()
            size = 0

    for index, (kind, level, text) in enumerate(blocks):
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
            if pages is not None:
                span.extend(pages[index])
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
    from kb.papers.links import page_facts

    facts = page_facts(html[:MAX_HEAD_CHARS], url)
    return Extracted(
        title=title,
        authors=(getattr(document, "author", None) or None),
        published=(getattr(document, "date", None) or None),
        site=(getattr(document, "sitename", None) or getattr(document, "hostname", None) or None),
        canonical_url=canonical,
        language=_language(html, document),
        passages=passages,
        content_hash=hashlib.sha256(" ".join(full_text.split()).encode()).hexdigest(),
        doi=facts.doi(),
        alternates=facts.alternates(),
    )
