"""Finding papers the user did not bring: arXiv's query API, OpenAlex and Semantic Scholar, asked
for a query, answered as candidates (title, authors, date, abstract, venue, citations where the
source counts them, and whether the knowledge base has the paper already); `kb discover --add N`
and the autopilot's research phase ingest the chosen ones through the usual ingestion.

    found = discover(db, "operator fusion cpu inference", ws.settings.kb, source="arxiv", limit=10)

Every call goes through kb.fetch (one deadline, a size cap, redirects checked hop by hop). What each
API answers, by its documented field names:

- arXiv (`export.arxiv.org/api/query`, Atom 1.0): `search_query` (`all:word AND all:word`, a
  `submittedDate:[YYYYMMDDHHMM TO YYYYMMDDHHMM]` range for `--since`), `start`, `max_results`,
  `sortBy=relevance`; each <entry> has <id> (http://arxiv.org/abs/ID vN), <title>, <summary>,
  <published>, <author><name>, <link title="pdf">, <arxiv:journal_ref>, <arxiv:doi>,
  <arxiv:primary_category>. A refused query is an HTTP 200 feed with one entry titled `Error`
  (its <id> under /api/errors); throttling is HTTP 429 or 503, or a bare `Rate exceeded.` body.
  Its terms ask for one call every three seconds: calls here wait `discovery.arxiv_delay` (3 s)
  after the previous one of this process.
- OpenAlex (`/works?search=`): `per_page`, `filter=from_publication_date:YYYY-MM-DD`, `mailto`
  (`discovery.mailto`), `api_key` (OPENALEX_API_KEY, optional: keyless calls get a small daily
  allowance); `results[]` with `id`, `display_name`, `publication_date`, `authorships[].author.
  display_name`, `primary_location.source.display_name` (venue), `primary_location.
  landing_page_url`, `best_oa_location.pdf_url`, `open_access.oa_url`, `cited_by_count`, `doi`,
  `abstract_inverted_index` (word -> positions: the abstract rebuilt from it).
- Semantic Scholar (`/graph/v1/paper/search`): `query`, `limit`, `fields` (named below),
  `publicationDateOrYear=YYYY-MM-DD:`, header `x-api-key` (S2_API_KEY, optional); `data[]` with
  `paperId`, `title`, `abstract`, `authors[].name`, `venue`, `year`, `publicationDate`,
  `citationCount`, `externalIds` (`ArXiv`, `DOI`), `openAccessPdf.url`, `url`. Unauthenticated
  calls share one pool and are answered HTTP 429 under load.

Rate limits: a 429 (or 503) with a Retry-After of at most `discovery.max_wait` seconds is waited
once and asked again; a longer one, or a second refusal, is one line that says the limit was hit
and for how long. A malformed answer (not Atom, not JSON, a field of the wrong type) is one line too.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from kb.errors import UserError
from kb.papers.fetching import USER_AGENT, parse_arxiv

if TYPE_CHECKING:
    import sqlite_utils

    from kb.config import DiscoverySettings, KBSettings
    from kb.papers.ingest import PaperKeys

SOURCES = ("arxiv", "openalex", "semantic-scholar")
MAX_QUERY_CHARS = 300
MAX_ANSWER_BYTES = 8_000_000
S2_FIELDS = "title,authors,year,publicationDate,abstract,venue,citationCount,externalIds,url,openAccessPdf"
OPENALEX_SELECT = (
    "id,doi,display_name,publication_date,authorships,primary_location,best_oa_location,"
    "open_access,cited_by_count,abstract_inverted_index,locations"
)
_ATOM = "{http://www.w3.org/2005/Atom}"
_ARXIV = "{http://arxiv.org/schemas/atom}"
_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
_FIELD_QUERY = re.compile(r"\b(ti|au|abs|co|jr|cat|rn|id|all|submittedDate):")


class RateLimited(UserError):
    """The API refused for now (HTTP 429 or 503, or arXiv's `Rate exceeded.`)."""


@dataclass(frozen=True)
class Candidate:
    """A paper a source proposes."""

    source: str
    id: str
    """The source's own id: the arXiv id, OpenAlex's W..., Semantic Scholar's paperId."""
    title: str
    authors: list[str]
    published: str | None
    abstract: str | None
    venue: str | None
    citations: int | None
    """None where the source counts none (arXiv)."""
    arxiv_id: str | None = None
    doi: str | None = None
    pdf_url: str | None = None
    landing_url: str | None = None
    known: int | None = None
    """The knowledge base's paper id when it has the paper already."""

    @property
    def location(self) -> str | None:
        """What ingestion is given: the arXiv id (its HTML, else its PDF), else the open PDF,
        else the landing page."""
        if self.arxiv_id:
            return f"arXiv:{self.arxiv_id}"
        return self.pdf_url or self.landing_url

    def keys(self) -> PaperKeys:
        from kb.papers.ingest import PaperKeys

        urls = tuple(u for u in (self.landing_url, self.pdf_url) if u)
        if self.arxiv_id:
            urls += (f"https://arxiv.org/abs/{self.arxiv_id}",)
        return PaperKeys(urls, self.doi, self.arxiv_id, self.title)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "location": self.location}


@dataclass
class Discovery:
    source: str
    query: str
    candidates: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What happened on the way: a courtesy delay or a Retry-After waited."""
    total: int | None = None
    """How many the source says match (where it says)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "query": self.query,
            "total": self.total,
            "notes": self.notes,
            "candidates": [c.to_json() for c in self.candidates],
        }


# --- calling an API -------------------------------------------------------------------------------

_last_call: dict[str, float] = {}
_pace = threading.Lock()


def _headers(settings: DiscoverySettings, accept: str) -> dict[str, str]:
    agent = USER_AGENT.replace("literature ingestion", "literature discovery")
    if settings.mailto:
        agent = agent.rstrip(")") + f"; mailto:{settings.mailto})"
    return {"User-Agent": agent, "Accept": accept}


def _get(
    source: str,
    url: str,
    settings: DiscoverySettings,
    *,
    accept: str,
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
    notes: list[str],
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """One API call: the courtesy delay since this process's previous call to the same host, one
    wait on a short Retry-After, and every refusal as one line."""
    from kb.fetch import HTTPStatusError, get

    host = urlsplit(url).netloc
    for attempt in (1, 2):
        if delay:
            with _pace:
                wait = _last_call.get(host, 0.0) + delay - time.monotonic()
                if wait > 0:
                    notes.append(f"waited {wait:.1f} s between {source} calls (its courtesy delay)")
                    sleep(wait)
                _last_call[host] = time.monotonic()
        try:
            page = get(
                url,
                timeout=settings.timeout,
                max_bytes=MAX_ANSWER_BYTES,
                headers={**_headers(settings, accept), **(headers or {})},
            )
        except HTTPStatusError as exc:
            limited = exc.status in (429, 503) or (exc.status == 403 and b"rate limit" in exc.body.lower())
            if not limited and not exc.body.lstrip().startswith(b"Rate exceeded"):
                raise UserError(f"{source}: {exc}{_reason(exc.body)}") from None
            asked = exc.retry_after
            if attempt == 1 and asked is not None and asked <= settings.max_wait:
                notes.append(f"{source} answered HTTP {exc.status} (rate limit): waited {asked:g} s as asked")
                sleep(asked)
                continue
            if attempt == 2:
                why = "again after waiting"
            elif asked is None:
                why = "no Retry-After"
            else:
                why = f"it asks to wait {asked:g} s, over discovery.max_wait = {settings.max_wait:g} s"
            raise RateLimited(
                f"{source}: rate limit hit (HTTP {exc.status}, {why}); try again later"
            ) from None
        if page.data.lstrip().startswith(b"Rate exceeded"):
            raise RateLimited(f"{source}: rate limit hit (the answer says 'Rate exceeded.'); try again later")
        return page.data
    raise AssertionError("unreachable")  # pragma: no cover


def _reason(body: bytes) -> str:
    """An API's own reason for a refusal, from a JSON error body (`message` or `error`)."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if isinstance(data, dict):
        for key in ("message", "error"):
            if isinstance(data.get(key), str) and data[key].strip():
                return f" ({' '.join(data[key].split())[:200]})"
    return ""


def _malformed(source: str, url: str, why: str) -> UserError:
    return UserError(f"{source}: malformed answer from {url} ({why})")


def _json(source: str, url: str, data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise _malformed(source, url, f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _malformed(source, url, f"a JSON {type(value).__name__}, not an object")
    return value


def _text(value: Any) -> str | None:
    return " ".join(value.split()) if isinstance(value, str) and value.strip() else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _doi(value: Any) -> str | None:
    text = _text(value)
    if not text:
        return None
    return re.sub(r"^(https?://(dx\.)?doi\.org/|doi:)", "", text, flags=re.IGNORECASE).lower()


def _arxiv_of_doi(doi: str | None) -> str | None:
    match = re.match(r"^10\.48550/arxiv\.(.+)$", doi or "", re.IGNORECASE)
    return match.group(1) if match else None


# --- arXiv ------------------------------------------------------------------------------------------


def arxiv_query(query: str, since: str | None) -> str:
    """arXiv's search_query: the user's own field syntax as given, else every word in all fields."""
    if _FIELD_QUERY.search(query):
        text = query
    else:
        words = [w for w in re.findall(r"[\w.+-]+", query) if w.upper() not in ("AND", "OR", "ANDNOT")]
        if not words:
            raise UserError(f"{query!r}: nothing to search for")
        text = " AND ".join(f"all:{w}" for w in words)
    if since:
        stamp = _full_date(since).replace("-", "")
        text = f"({text}) AND submittedDate:[{stamp}0000 TO 299912312359]"
    return text


def _arxiv(
    query: str, limit: int, since: str | None, settings: DiscoverySettings, notes: list[str]
) -> Discovery:
    params = {
        "search_query": arxiv_query(query, since),
        "start": 0,
        "max_results": limit,
        "sortBy": "relevance",
        "sortOrder": "descending",
    }
    url = f"{settings.arxiv_api}?{urlencode(params)}"
    data = _get(
        "arxiv", url, settings, accept="application/atom+xml", delay=settings.arxiv_delay, notes=notes
    )
    return parse_arxiv_feed(data, url, query)


def parse_arxiv_feed(data: bytes, url: str, query: str) -> Discovery:
    head = data[:4096].lower()
    if b"<!doctype" in head or b"<!entity" in data.lower():
        raise _malformed("arxiv", url, "a document type or entity declaration in the feed")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise _malformed("arxiv", url, f"not XML: {exc}") from None
    if root.tag != f"{_ATOM}feed":
        raise _malformed("arxiv", url, f"not an Atom feed (root <{root.tag.split('}')[-1]}>)")
    found = Discovery("arxiv", query)
    total = root.findtext("{http://a9.com/-/spec/opensearch/1.1/}totalResults")
    found.total = int(total) if total and total.strip().isdigit() else None
    for entry in root.findall(f"{_ATOM}entry"):
        entry_id = (entry.findtext(f"{_ATOM}id") or "").strip()
        title = _text(entry.findtext(f"{_ATOM}title"))
        if "/api/errors" in entry_id or (title == "Error" and len(root.findall(f"{_ATOM}entry")) == 1):
            reason = _text(entry.findtext(f"{_ATOM}summary")) or "no reason given"
            raise UserError(f"arxiv: the API refused the query ({reason})")
        ref = parse_arxiv(entry_id)
        if ref is None or not title:
            raise _malformed("arxiv", url, f"an entry without an arXiv id or a title (id {entry_id[:80]!r})")
        pdf = next(
            (link.get("href") for link in entry.findall(f"{_ATOM}link") if link.get("title") == "pdf"), None
        )
        published = _text(entry.findtext(f"{_ATOM}published"))
        category = entry.find(f"{_ARXIV}primary_category")
        venue = _text(entry.findtext(f"{_ARXIV}journal_ref")) or (
            f"arXiv {category.get('term')}" if category is not None and category.get("term") else "arXiv"
        )
        found.candidates.append(
            Candidate(
                source="arxiv",
                id=ref.id,
                title=title,
                authors=[
                    name
                    for author in entry.findall(f"{_ATOM}author")
                    if (name := _text(author.findtext(f"{_ATOM}name")))
                ],
                published=published[:10] if published else None,
                abstract=_text(entry.findtext(f"{_ATOM}summary")),
                venue=venue,
                citations=None,
                arxiv_id=ref.id,
                doi=_doi(entry.findtext(f"{_ARXIV}doi")),
                pdf_url=pdf,
                landing_url=f"https://arxiv.org/abs/{ref.id}",
            )
        )
    return found


# --- OpenAlex ---------------------------------------------------------------------------------------


def _abstract(index: Any) -> str | None:
    """OpenAlex's abstract_inverted_index (word -> positions) back to text."""
    if not isinstance(index, dict) or not index:
        return None
    placed: dict[int, str] = {}
    for word, positions in index.items():
        if isinstance(positions, list):
            for pos in positions:
                if isinstance(pos, int) and 0 <= pos < 100_000:
                    placed[pos] = str(word)
    return " ".join(placed[p] for p in sorted(placed)) or None


def _openalex(
    query: str, limit: int, since: str | None, settings: DiscoverySettings, notes: list[str]
) -> Discovery:
    params: dict[str, Any] = {"search": query, "per_page": limit, "select": OPENALEX_SELECT}
    if since:
        params["filter"] = f"from_publication_date:{_full_date(since)}"
    if settings.mailto:
        params["mailto"] = settings.mailto
    key = os.environ.get("OPENALEX_API_KEY", "").strip()
    if key:
        params["api_key"] = key
    url = f"{settings.openalex_api.rstrip('/')}/works?{urlencode(params)}"
    shown = url.replace(key, "***") if key else url
    data = _get("openalex", url, settings, accept="application/json", notes=notes)
    return parse_openalex(data, shown, query)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_openalex(data: bytes, url: str, query: str) -> Discovery:
    answer = _json("openalex", url, data)
    results = answer.get("results")
    if not isinstance(results, list):
        raise _malformed("openalex", url, "no `results` list")
    found = Discovery("openalex", query, total=_int(_dict(answer.get("meta")).get("count")))
    for work in results:
        if not isinstance(work, dict):
            raise _malformed("openalex", url, "a result that is not an object")
        title = _text(work.get("display_name")) or _text(work.get("title"))
        work_id = _text(work.get("id"))
        if not title or not work_id:
            raise _malformed("openalex", url, "a work without an `id` or a `display_name`")
        primary = _dict(work.get("primary_location"))
        best = _dict(work.get("best_oa_location"))
        doi = _doi(work.get("doi"))
        arxiv_id = _arxiv_of_doi(doi)
        for loc in [primary, *(_dict(x) for x in _list(work.get("locations")))]:
            ref = parse_arxiv(str(loc.get("landing_page_url") or ""))
            if arxiv_id is None and ref is not None:
                arxiv_id = ref.id
        authorships = _list(work.get("authorships"))
        found.candidates.append(
            Candidate(
                source="openalex",
                id=work_id.rsplit("/", 1)[-1],
                title=title,
                authors=[
                    name
                    for a in authorships
                    if (name := _text(_dict(_dict(a).get("author")).get("display_name")))
                ],
                published=_text(work.get("publication_date")),
                abstract=_abstract(work.get("abstract_inverted_index")),
                venue=_text(_dict(primary.get("source")).get("display_name")),
                citations=_int(work.get("cited_by_count")),
                arxiv_id=arxiv_id,
                doi=doi,
                pdf_url=_text(best.get("pdf_url"))
                or _text(primary.get("pdf_url"))
                or _text(_dict(work.get("open_access")).get("oa_url")),
                landing_url=_text(primary.get("landing_page_url"))
                or (f"https://doi.org/{doi}" if doi else None),
            )
        )
    return found


# --- Semantic Scholar ---------------------------------------------------------------------------------


def _semantic_scholar(
    query: str, limit: int, since: str | None, settings: DiscoverySettings, notes: list[str]
) -> Discovery:
    params: dict[str, Any] = {"query": query, "limit": limit, "fields": S2_FIELDS}
    if since:
        params["publicationDateOrYear"] = f"{_full_date(since)}:"
    key = os.environ.get("S2_API_KEY", "").strip()
    url = f"{settings.semantic_scholar_api.rstrip('/')}/paper/search?{urlencode(params)}"
    headers = {"x-api-key": key} if key else None
    data = _get("semantic-scholar", url, settings, accept="application/json", headers=headers, notes=notes)
    return parse_semantic_scholar(data, url, query)


def parse_semantic_scholar(data: bytes, url: str, query: str) -> Discovery:
    answer = _json("semantic-scholar", url, data)
    papers = answer.get("data", [] if _int(answer.get("total")) == 0 else None)
    if not isinstance(papers, list):
        raise _malformed("semantic-scholar", url, "no `data` list")
    found = Discovery("semantic-scholar", query, total=_int(answer.get("total")))
    for paper in papers:
        if not isinstance(paper, dict):
            raise _malformed("semantic-scholar", url, "a paper that is not an object")
        title = _text(paper.get("title"))
        paper_id = _text(paper.get("paperId"))
        if not title or not paper_id:
            raise _malformed("semantic-scholar", url, "a paper without a `paperId` or a `title`")
        ids = _dict(paper.get("externalIds"))
        year = _int(paper.get("year"))
        authors = _list(paper.get("authors"))
        found.candidates.append(
            Candidate(
                source="semantic-scholar",
                id=paper_id,
                title=title,
                authors=[name for a in authors if (name := _text(_dict(a).get("name")))],
                published=_text(paper.get("publicationDate")) or (str(year) if year else None),
                abstract=_text(paper.get("abstract")),
                venue=_text(paper.get("venue")),
                citations=_int(paper.get("citationCount")),
                arxiv_id=_text(ids.get("ArXiv")),
                doi=_doi(ids.get("DOI")),
                pdf_url=_text(_dict(paper.get("openAccessPdf")).get("url")),
                landing_url=_text(paper.get("url")),
            )
        )
    return found


# --- the entry point --------------------------------------------------------------------------------


def _full_date(since: str) -> str:
    return {4: f"{since}-01-01", 7: f"{since}-01"}.get(len(since), since)


def check_since(since: str | None) -> str | None:
    """`--since` as YYYY, YYYY-MM or YYYY-MM-DD (a real date), or a one-line error."""
    if since is None:
        return None
    since = since.strip()
    if not _DATE.match(since):
        raise UserError(f"--since {since}: not a date (YYYY-MM-DD, YYYY-MM or YYYY)")
    import datetime

    try:
        datetime.date.fromisoformat(_full_date(since))
    except ValueError as exc:
        raise UserError(f"--since {since}: not a date ({exc})") from None
    return since


def discover(
    db: sqlite_utils.Database | None,
    query: str,
    kb: KBSettings,
    *,
    source: str | None = None,
    limit: int = 10,
    since: str | None = None,
) -> Discovery:
    """Candidates for `query` from one source, each marked when the knowledge base has it."""
    from kb.papers.ingest import known_paper

    settings = kb.discovery
    source = source or settings.source
    if source not in SOURCES:
        raise UserError(f"--source {source}: unknown (sources: {', '.join(SOURCES)})")
    query = " ".join(query.split())
    if not query:
        raise UserError("discover: give a query")
    if len(query) > MAX_QUERY_CHARS:
        raise UserError(f"discover: the query is {len(query)} characters (at most {MAX_QUERY_CHARS})")
    if not 1 <= limit <= 100:
        raise UserError(f"--limit {limit}: between 1 and 100")
    since = check_since(since)
    notes: list[str] = []
    ask = {"arxiv": _arxiv, "openalex": _openalex, "semantic-scholar": _semantic_scholar}[source]
    found = ask(query, limit, since, settings, notes)
    found.notes = notes
    if db is not None:
        marked = []
        for cand in found.candidates[:limit]:
            hit = known_paper(db, cand.keys())
            marked.append(_with_known(cand, int(hit["id"]) if hit else None))
        found.candidates = marked
    return found


def _with_known(cand: Candidate, known: int | None) -> Candidate:
    from dataclasses import replace

    return replace(cand, known=known)


def offline_reason(kb: KBSettings, source: str | None = None, *, timeout: float = 3.0) -> str | None:
    """Why discovery cannot reach its source now (None: it can): AUTORESEARCH_OFFLINE set, or the
    API's host does not resolve or accept a connection within `timeout` (through a proxy, when one
    is set for it, the proxy decides later)."""
    import socket
    import urllib.request

    if os.environ.get("AUTORESEARCH_OFFLINE", "").strip() not in ("", "0"):
        return "AUTORESEARCH_OFFLINE is set"
    settings = kb.discovery
    base = {
        "arxiv": settings.arxiv_api,
        "openalex": settings.openalex_api,
        "semantic-scholar": settings.semantic_scholar_api,
    }[source or settings.source]
    parts = urlsplit(base)
    host = parts.hostname or ""
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{host} cannot be reached ({exc.strerror or exc})"
