"""Servers on 127.0.0.1 that answer as the scholarly APIs do (and as GitHub's pulls list does), for
discovery and pull-request tests: arXiv's Atom feed, OpenAlex's and Semantic Scholar's JSON with
their documented field names, rate-limit refusals and malformed answers.

    with APIServer() as api:
        api.answer("/api/query", atom_feed([ARXIV_ENTRY]), content_type="application/atom+xml")
        api.answer("/works", {"status": 429, "headers": {"Retry-After": "1"}}, openalex_page([...]))
        ... api.calls[0].query["search_query"]
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Call:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float


class APIServer:
    """Answers by path (the query string is recorded, not matched): each path's answers are given
    in turn, the last one again once they run out."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Answer]] = {}
        self.calls: list[Call] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                outer.calls.append(Call(parts.path, query, dict(self.headers.items()), time.monotonic()))
                answers = outer.routes.get(parts.path)
                if not answers:
                    self.send_error(404, "Not Found")
                    return
                seen = sum(1 for c in outer.calls if c.path == parts.path) - 1
                answer = answers[min(seen, len(answers) - 1)]
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(answer.body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> APIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, path: str, *answers: Answer | dict[str, Any] | bytes | str, **options: Any) -> str:
        """Answers for `path`: an Answer, JSON (a dict without "status"), a {"status": ...} refusal
        (with "headers", "body"), or bytes / text with `content_type` in options."""
        made = []
        for item in answers:
            if isinstance(item, Answer):
                made.append(item)
            elif isinstance(item, dict) and "status" in item:
                body = item.get("body", {"message": "Too Many Requests. Please wait and try again"})
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                made.append(Answer(data, int(item["status"]), headers=dict(item.get("headers", {}))))
            elif isinstance(item, dict | list):
                made.append(Answer(json.dumps(item).encode()))
            else:
                data = item.encode() if isinstance(item, str) else item
                made.append(Answer(data, content_type=options.get("content_type", "application/json")))
        self.routes[path] = made
        return self.base + path


# --- arXiv's Atom --------------------------------------------------------------------------------


def arxiv_entry(
    arxiv_id: str,
    title: str,
    *,
    summary: str = "We fuse the gate and up projections of expert layers into one kernel.",
    authors: tuple[str, ...] = ("Ada Lovelace", "Alan Turing"),
    published: str = "2025-05-06T17:59:59Z",
    journal_ref: str | None = None,
    doi: str | None = None,
) -> str:
    """One <entry> as arXiv's API writes it (title and summary hard-wrapped, as arXiv's are)."""
    cut = title.find(" ", len(title) // 2)
    wrapped = f"{title[:cut]}\n  {title[cut + 1 :]}" if cut > 0 else title
    extra = f"<arxiv:journal_ref>{escape(journal_ref)}</arxiv:journal_ref>" if journal_ref else ""
    extra += f"<arxiv:doi>{escape(doi)}</arxiv:doi>" if doi else ""
    names = "".join(f"<author><name>{escape(a)}</name></author>" for a in authors)
    return f"""<entry>
    <id>http://arxiv.org/abs/{arxiv_id}v2</id>
    <updated>2025-06-01T00:00:00Z</updated>
    <published>{published}</published>
    <title>{escape(wrapped)}</title>
    <summary>  {escape(summary)}
</summary>
    {names}
    {extra}
    <link href="http://arxiv.org/abs/{arxiv_id}v2" rel="alternate" type="text/html"/>
    <link title="pdf" href="http://arxiv.org/pdf/{arxiv_id}v2" rel="related" type="application/pdf"/>
    <arxiv:primary_category xmlns:arxiv="http://arxiv.org/schemas/atom" term="cs.LG" scheme="http://arxiv.org/schemas/atom"/>
    <category term="cs.LG" scheme="http://arxiv.org/schemas/atom"/>
  </entry>"""


def atom_feed(entries: list[str], total: int | None = None) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"
      xmlns:arxiv="http://arxiv.org/schemas/atom">
  <link href="http://arxiv.org/api/query?search_query%3Dall%3Afusion" rel="self" type="application/atom+xml"/>
  <title type="html">ArXiv Query: search_query=all:fusion&amp;id_list=&amp;start=0&amp;max_results=10</title>
  <id>http://arxiv.org/api/cHxbiOdZaP56ODnBPIenZhzg5f8</id>
  <updated>2025-06-01T00:00:00-04:00</updated>
  <opensearch:totalResults>{total if total is not None else len(entries)}</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <opensearch:itemsPerPage>10</opensearch:itemsPerPage>
  {"".join(entries)}
</feed>"""


ARXIV_ERROR = atom_feed(
    [
        """<entry>
    <id>http://arxiv.org/api/errors#incorrect_id_format_for_1234</id>
    <title>Error</title>
    <summary>incorrect id format for 1234</summary>
    <updated>2025-06-01T00:00:00-04:00</updated>
    <link href="http://arxiv.org/api/errors#incorrect_id_format_for_1234" rel="alternate" type="text/html"/>
    <author><name>arXiv api core</name></author>
  </entry>"""
    ]
)


# --- OpenAlex and Semantic Scholar ----------------------------------------------------------------


def openalex_work(
    work_id: str,
    title: str,
    *,
    doi: str | None = None,
    pdf_url: str | None = None,
    landing: str | None = None,
    cited: int = 0,
    venue: str = "Proceedings of MLSys",
    date: str = "2024-05-01",
) -> dict[str, Any]:
    """A work as /works returns it (the fields OPENALEX_SELECT asks for)."""
    words = [
        "Expert",
        "layers",
        "read",
        "their",
        "weights",
        "twice;",
        "one",
        "fused",
        "kernel",
        "reads",
        "them",
        "once",
    ]
    index: dict[str, list[int]] = {}
    for pos, word in enumerate(words):
        index.setdefault(word, []).append(pos)
    location = {
        "is_oa": pdf_url is not None,
        "landing_page_url": landing,
        "pdf_url": pdf_url,
        "source": {"id": "https://openalex.org/S1", "display_name": venue, "type": "conference"},
        "license": None,
        "version": "publishedVersion",
    }
    return {
        "id": f"https://openalex.org/{work_id}",
        "doi": f"https://doi.org/{doi}" if doi else None,
        "title": title,
        "display_name": title,
        "publication_year": int(date[:4]),
        "publication_date": date,
        "authorships": [
            {
                "author_position": "first",
                "author": {"id": "https://openalex.org/A1", "display_name": "Grace Hopper"},
            },
            {
                "author_position": "last",
                "author": {"id": "https://openalex.org/A2", "display_name": "Edsger Dijkstra"},
            },
        ],
        "primary_location": location,
        "best_oa_location": location if pdf_url else None,
        "locations": [location],
        "open_access": {"is_oa": pdf_url is not None, "oa_status": "green", "oa_url": pdf_url},
        "cited_by_count": cited,
        "abstract_inverted_index": index,
    }


def openalex_page(works: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "meta": {"count": len(works), "db_response_time_ms": 12, "page": 1, "per_page": 25},
        "results": works,
        "group_by": [],
    }


def s2_paper(
    paper_id: str,
    title: str,
    *,
    arxiv: str | None = None,
    doi: str | None = None,
    pdf_url: str | None = None,
    citations: int = 0,
) -> dict[str, Any]:
    """A paper as /graph/v1/paper/search returns it for the fields discovery asks."""
    ids: dict[str, Any] = {"CorpusId": 123456}
    if arxiv:
        ids["ArXiv"] = arxiv
    if doi:
        ids["DOI"] = doi
    return {
        "paperId": paper_id,
        "externalIds": ids,
        "url": f"https://www.semanticscholar.org/paper/{paper_id}",
        "title": title,
        "abstract": "A fused gate and up projection halves the weight traffic of expert layers.",
        "venue": "arXiv.org",
        "year": 2025,
        "citationCount": citations,
        "openAccessPdf": {"url": pdf_url or "", "status": "GREEN" if pdf_url else None},
        "publicationDate": "2025-02-03",
        "authors": [{"authorId": "1", "name": "Barbara Liskov"}, {"authorId": "2", "name": "Donald Knuth"}],
    }


def s2_page(papers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"total": len(papers), "offset": 0, "data": papers}
