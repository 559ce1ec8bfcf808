"""Reading lists: `kb add-paper URL --follow N` ingests the page and up to N papers it links to (a
survey's references, a blog post's sources), each link through the same ingestion as a URL the
user gives (one deadline, the size cap, redirects checked hop by hop, HTML or PDF, each paper all
or nothing, one paper whatever address it is met at).

Which links: those of the page's article (<article> or <main>), else of its body less its menus,
headers, footers and sidebars (kb/papers/links.py), in the page's order, each address once (arXiv's
abs, html and pdf links of one paper are one). Skipped, each with its reason: links that are not
http(s) (mailto:, javascript:, ftp:, file:), links back to the page itself, and those past the N
followed. A link that fails (dead, not a paper, too big) is reported and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kb.errors import UserError
from kb.papers.fetching import Fetched, decode_html, fetch, is_pdf, is_url, normalise_url, parse_arxiv
from kb.papers.ingest import PaperResult, add_paper
from kb.papers.links import page_facts

if TYPE_CHECKING:
    import sqlite_utils

    from kb.config import KBSettings

MAX_FOLLOW = 200


@dataclass(frozen=True)
class Skipped:
    link: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"link": self.link, "why": self.why}


@dataclass
class FollowReport:
    page: PaperResult
    followed: list[PaperResult] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = {"added": 0, "exists": 0, "error": 0}
        for result in self.followed:
            found[result.status] += 1
        return found

    def summary(self) -> str:
        n = self.counts()
        reasons: dict[str, int] = {}
        for skip in self.skipped:
            reasons[skip.why] = reasons.get(skip.why, 0) + 1
        skipped = "; ".join(f"{count} {why}" for why, count in reasons.items())
        return (
            f"{self.page.input}: followed {len(self.followed)} links: {n['added']} added, "
            f"{n['exists']} already in the knowledge base, {n['error']} failed"
            + (f"; skipped {len(self.skipped)} ({skipped})" if self.skipped else "")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "page": self.page.to_json(),
            "followed": [r.to_json() for r in self.followed],
            "skipped": [s.to_json() for s in self.skipped],
            "counts": self.counts(),
        }


def _key(url: str) -> str:
    arxiv = parse_arxiv(url)
    if arxiv:
        return f"arxiv:{arxiv.id}"
    try:
        return normalise_url(url)
    except UserError:
        return url


def _links(fetched: Fetched, label: str) -> list[str]:
    if is_pdf(fetched.content_type, fetched.data[:8192]):
        return []  # a PDF's references are text, not links
    html, _ = decode_html(fetched.data, fetched.charset, label)
    base = fetched.url if fetched.url.startswith(("http://", "https://")) else None
    return page_facts(html, base).links


def follow(
    db: sqlite_utils.Database,
    location: str,
    settings: KBSettings,
    n: int,
    progress: Callable[[PaperResult], None] | None = None,
) -> FollowReport:
    """The page at `location` (a URL, or an HTML file whose links are absolute) and up to `n` of
    the papers it links to. The page's own failure raises UserError; a link's is in the report."""
    if not 0 <= n <= MAX_FOLLOW:
        raise UserError(f"--follow {n}: between 0 and {MAX_FOLLOW}")
    if is_url(location):
        fetched = fetch(location, timeout=settings.fetch_timeout, max_bytes=settings.max_page_bytes)
    else:
        from pathlib import Path

        from kb.papers.fetching import read_file

        fetched = read_file(Path(location).expanduser(), max_bytes=settings.max_page_bytes)
    page = add_paper(db, location, settings, fetched=fetched)
    report = FollowReport(page)
    seen = {_key(location), _key(fetched.url)}
    for link in _links(fetched, location):
        scheme = urlsplit(link).scheme.lower()
        if scheme not in ("http", "https"):
            report.skipped.append(Skipped(link, f"not http(s) ({scheme or 'no scheme'}:)"))
            continue
        key = _key(link)
        if key in seen:
            continue  # the page itself, or a paper already followed under another address
        seen.add(key)
        if len(report.followed) >= n:
            report.skipped.append(Skipped(link, f"over --follow {n}"))
            continue
        try:
            result = add_paper(db, link, settings)
        except UserError as exc:
            result = PaperResult(link, "error", str(exc))
        report.followed.append(result)
        if progress is not None:
            progress(result)
    return report
