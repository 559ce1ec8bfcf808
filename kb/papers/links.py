"""What a page says about itself and where it points: its scholarly <meta> tags (Highwire's
`citation_pdf_url`, `citation_doi`, ..., which Google Scholar reads and publishers, arXiv and
OpenReview write) and its links in document order. Stdlib's html.parser: it never fails on broken
HTML, it only sees less."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

MAX_LINKS = 5000
"""Links read from one page at most (a huge index page is not read to its end)."""

_DOI = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:)?\s*(10\.\d{4,9}/\S+)$", re.IGNORECASE)


@dataclass
class PageFacts:
    meta: dict[str, str] = field(default_factory=dict)
    """Lower-case <meta name|property> -> its first content."""
    links: list[str] = field(default_factory=list)
    """<a href> targets made absolute, fragments dropped, each once, in document order: those of
    the page's article (<article> or <main>, when it has one), else of its body less its <nav>,
    <header>, <footer> and <aside> (a reading list's references, not its menus)."""
    all_links: list[str] = field(default_factory=list)
    """Every <a href> target, chrome included (made absolute, each once)."""
    pdf_links: list[str] = field(default_factory=list)
    """<link rel=alternate type=application/pdf> targets."""

    def doi(self) -> str | None:
        for key in ("citation_doi", "dc.identifier", "prism.doi"):
            match = _DOI.match(self.meta.get(key, "").strip())
            if match:
                return match.group(1).rstrip(".,;").lower()
        return None

    def alternates(self) -> list[str]:
        """Other addresses of the same paper the page names (http(s) only)."""
        found = [
            self.meta.get(k, "")
            for k in ("citation_pdf_url", "citation_abstract_html_url", "citation_fulltext_html_url")
        ]
        return [u for u in dict.fromkeys([*found, *self.pdf_links]) if u.startswith(("http://", "https://"))]


CHROME = frozenset({"nav", "header", "footer", "aside"})
ARTICLE = frozenset({"article", "main"})


class _Reader(HTMLParser):
    def __init__(self, base: str | None) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.facts = PageFacts()
        self._seen: set[str] = set()
        self._depth = {name: 0 for name in (*CHROME, *ARTICLE)}
        self._in_article: list[str] = []
        self._outside: list[str] = []

    def handle_endtag(self, tag: str) -> None:
        if tag in self._depth and self._depth[tag] > 0:
            self._depth[tag] -= 1

    def _absolute(self, href: str) -> str | None:
        href = href.strip()
        if not href:
            return None
        try:
            url = urljoin(self.base, href) if self.base else href
            urlsplit(url).port  # noqa: B018 (a malformed port or bracket raises)
        except ValueError:
            return None
        return urldefrag(url)[0] or None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k.lower(): (v or "") for k, v in attrs}
        if tag in self._depth:
            self._depth[tag] += 1
        if tag == "meta":
            name = (values.get("name") or values.get("property") or "").strip().lower()
            if name and name not in self.facts.meta and values.get("content"):
                content = values["content"].strip()
                if name in ("citation_pdf_url", "citation_abstract_html_url", "citation_fulltext_html_url"):
                    content = self._absolute(content) or ""
                self.facts.meta[name] = content
        elif tag == "link" and "alternate" in values.get("rel", "").lower():
            if values.get("type", "").lower() == "application/pdf":
                url = self._absolute(values.get("href", ""))
                if url:
                    self.facts.pdf_links.append(url)
        elif tag == "a" and len(self.facts.all_links) < MAX_LINKS:
            url = self._raw_link(values.get("href", ""))
            if url and url not in self._seen and url != self.base:
                self._seen.add(url)
                self.facts.all_links.append(url)
                if any(self._depth[name] for name in ARTICLE):
                    self._in_article.append(url)
                elif not any(self._depth[name] for name in CHROME):
                    self._outside.append(url)

    def _raw_link(self, href: str) -> str | None:
        """A link made absolute, whatever its scheme (the caller says why it skips mailto: and the like)."""
        href = href.strip()
        if not href or href.startswith("#"):
            return None
        return self._absolute(href)

    def finish(self) -> PageFacts:
        self.facts.links = self._in_article or self._outside
        return self.facts


def page_facts(html: str, base: str | None) -> PageFacts:
    reader = _Reader(base)
    try:
        reader.feed(html)
        reader.close()
    except (AssertionError, ValueError):  # html.parser's rare hard failures: keep what was read
        pass
    return reader.finish()
