"""Discovery against servers on 127.0.0.1 that answer as arXiv (Atom), OpenAlex and Semantic
Scholar (JSON, their field names) do: candidates, what the knowledge base has, rate limits waited
or reported, malformed answers in one line, and `kb discover --add` through the real CLI."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.config import KBSettings
from kb.errors import UserError
from kb.papers import add_paper
from kb.papers.discover import RateLimited, discover
from kb.workspace import Workspace
from tests.kb.api_support import (
    ARXIV_ERROR,
    APIServer,
    arxiv_entry,
    atom_feed,
    openalex_page,
    openalex_work,
    s2_page,
    s2_paper,
)
from tests.kb.helpers import ENGLISH_SECTIONS, LoopbackServer, article_page, db_dump, set_kb_settings
from tests.kb.pdf_support import two_column_paper
from tui.cli import main

FUSION = "Fusing Gate and Up Projections for Faster Expert Layers"
OTHER = "Operator Fusion for Memory Bound Inference on CPUs"


@pytest.fixture
def api() -> Iterator[APIServer]:
    with APIServer() as server:
        yield server


def settings(api: APIServer, **discovery: object) -> KBSettings:
    return KBSettings.model_validate(
        {
            "fetch_timeout": 5.0,
            "arxiv_base": api.base,
            "discovery": {
                "arxiv_api": f"{api.base}/api/query",
                "openalex_api": api.base,
                "semantic_scholar_api": f"{api.base}/graph/v1",
                "arxiv_delay": 0.0,
                "timeout": 5.0,
                **discovery,
            },
        }
    )


def test_arxiv_candidates_with_what_the_kb_has(workspace: Workspace, api: APIServer) -> None:
    api.answer("/html/2401.01234", article_page(OTHER, ENGLISH_SECTIONS), content_type="text/html")
    kb = settings(api)
    db = workspace.db()
    have = add_paper(db, "arXiv:2401.01234", kb)
    assert have.status == "added"
    feed = atom_feed(
        [
            arxiv_entry("2505.01234", FUSION, journal_ref="MLSys 2025", doi="10.1000/xyz"),
            arxiv_entry("2401.01234", OTHER),
        ],
        total=57,
    )
    api.answer("/api/query", feed, content_type="application/atom+xml; charset=utf-8")
    found = discover(db, "gate up   fusion", kb, source="arxiv", limit=5, since="2024-06")
    call = api.calls[-1]
    assert call.query["search_query"] == (
        "(all:gate AND all:up AND all:fusion) AND submittedDate:[202406010000 TO 299912312359]"
    )
    assert (call.query["max_results"], call.query["sortBy"]) == ("5", "relevance")
    assert call.headers["User-Agent"].startswith("autoresearch-kb/")
    assert found.total == 57
    first, second = found.candidates
    assert first.title == FUSION  # arXiv's hard-wrapped title made one line again
    assert first.id == first.arxiv_id == "2505.01234"
    assert first.authors == ["Ada Lovelace", "Alan Turing"]
    assert first.published == "2025-05-06" and first.venue == "MLSys 2025" and first.citations is None
    assert first.doi == "10.1000/xyz" and first.pdf_url == "http://arxiv.org/pdf/2505.01234v2"
    assert first.abstract is not None and first.abstract.startswith("We fuse the gate")
    assert first.known is None and first.location == "arXiv:2505.01234"
    assert second.known == have.source_id and second.venue == "arXiv cs.LG"


def test_arxiv_courtesy_delay_between_calls(workspace: Workspace, api: APIServer) -> None:
    api.answer(
        "/api/query", atom_feed([arxiv_entry("2505.01234", FUSION)]), content_type="application/atom+xml"
    )
    kb = settings(api, arxiv_delay=0.6)
    discover(None, "fusion", kb, source="arxiv")
    again = discover(None, "fusion kernels", kb, source="arxiv")
    first, second = api.calls[-2:]
    assert second.at - first.at >= 0.55
    assert again.notes and again.notes[0].startswith("waited") and "courtesy delay" in again.notes[0]


def test_arxiv_refusals_are_one_line(workspace: Workspace, api: APIServer) -> None:
    kb = settings(api, max_wait=5)
    api.answer("/api/query", ARXIV_ERROR, content_type="application/atom+xml")
    with pytest.raises(
        UserError, match=r"^arxiv: the API refused the query \(incorrect id format for 1234\)$"
    ):
        discover(None, "id:1234", kb, source="arxiv")
    api.answer("/api/query", {"status": 503, "headers": {"Retry-After": "120"}, "body": b"Rate exceeded."})
    with pytest.raises(RateLimited) as caught:
        discover(None, "fusion", kb, source="arxiv")
    assert str(caught.value) == (
        "arxiv: rate limit hit (HTTP 503, it asks to wait 120 s, over discovery.max_wait = 5 s); "
        "try again later"
    )
    api.answer("/api/query", "Rate exceeded.", content_type="text/plain")
    with pytest.raises(RateLimited, match=r"^arxiv: rate limit hit \(the answer says 'Rate exceeded\.'\)"):
        discover(None, "fusion", kb, source="arxiv")
    for body, why in (
        ("<html><body>Service moved</body></html>", r"not an Atom feed \(root <html>\)"),
        ("<feed xmlns='http://www.w3.org/2005/Atom'><entry>", r"not XML: "),
        ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><feed/>', "entity declaration"),
    ):
        api.answer("/api/query", body, content_type="application/atom+xml")
        with pytest.raises(UserError) as caught_bad:
            discover(None, "fusion", kb, source="arxiv")
        message = str(caught_bad.value)
        assert message.startswith(f"arxiv: malformed answer from {api.base}/api/query?")
        assert "\n" not in message
        assert re.search(why, message), message


def test_openalex_waits_a_short_retry_after_then_answers(workspace: Workspace, api: APIServer) -> None:
    works = [
        openalex_work(
            "W4390000001",
            FUSION,
            doi="10.48550/arxiv.2505.01234",
            landing="https://arxiv.org/abs/2505.01234",
            cited=31,
        ),
        openalex_work(
            "W4390000002", OTHER, doi="10.1145/3600006.3613165", pdf_url=f"{api.base}/oa/other.pdf", cited=7
        ),
    ]
    api.answer("/works", {"status": 429, "headers": {"Retry-After": "1"}}, openalex_page(works))
    kb = settings(api, mailto="lab@example.org")
    started = time.monotonic()
    found = discover(workspace.db(), "expert layer fusion", kb, source="openalex", limit=2, since="2024")
    assert time.monotonic() - started >= 0.95
    assert [c.path for c in api.calls] == ["/works", "/works"]
    query = api.calls[-1].query
    assert query["search"] == "expert layer fusion" and query["per_page"] == "2"
    assert query["filter"] == "from_publication_date:2024-01-01" and query["mailto"] == "lab@example.org"
    assert "abstract_inverted_index" in query["select"] and "cited_by_count" in query["select"]
    assert found.notes == ["openalex answered HTTP 429 (rate limit): waited 1 s as asked"]
    first, second = found.candidates
    assert (first.id, first.title, first.citations) == ("W4390000001", FUSION, 31)
    assert first.arxiv_id == "2505.01234" and first.location == "arXiv:2505.01234"
    assert first.authors == ["Grace Hopper", "Edsger Dijkstra"] and first.venue == "Proceedings of MLSys"
    assert first.abstract == "Expert layers read their weights twice; one fused kernel reads them once"
    assert second.doi == "10.1145/3600006.3613165" and second.location == f"{api.base}/oa/other.pdf"
    assert second.landing_url == "https://doi.org/10.1145/3600006.3613165"


def test_semantic_scholar_rate_limit_and_key(
    workspace: Workspace, api: APIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S2_API_KEY", "s2-test-key")
    papers = [s2_paper("abc123", FUSION, arxiv="2505.01234", citations=12), s2_paper("def456", OTHER)]
    api.answer("/graph/v1/paper/search", s2_page(papers))
    kb = settings(api, max_wait=5)
    found = discover(workspace.db(), "fused experts", kb, source="semantic-scholar", since="2025-01-15")
    call = api.calls[-1]
    assert call.headers.get("x-api-key") == "s2-test-key"
    assert call.query["publicationDateOrYear"] == "2025-01-15:"
    assert set(call.query["fields"].split(",")) >= {"title", "authors", "citationCount", "externalIds"}
    first, second = found.candidates
    assert (first.id, first.citations, first.arxiv_id, first.published) == (
        "abc123",
        12,
        "2505.01234",
        "2025-02-03",
    )
    assert first.authors == ["Barbara Liskov", "Donald Knuth"] and first.venue == "arXiv.org"
    assert second.pdf_url is None and second.location == "https://www.semanticscholar.org/paper/def456"
    refusal = {"status": 429, "headers": {"Retry-After": "1"}}
    api.answer("/graph/v1/paper/search", refusal, refusal)
    with pytest.raises(RateLimited) as caught:
        discover(None, "fused experts", kb, source="semantic-scholar")
    assert (
        str(caught.value)
        == "semantic-scholar: rate limit hit (HTTP 429, again after waiting); try again later"
    )
    api.answer("/graph/v1/paper/search", {"total": 3, "offset": 0, "data": "not a list"})
    with pytest.raises(UserError, match=r"^semantic-scholar: malformed answer from .* \(no `data` list\)$"):
        discover(None, "fused experts", kb, source="semantic-scholar")
    api.answer("/works", b"<html>maintenance</html>", content_type="text/html")
    with pytest.raises(UserError, match=r"^openalex: malformed answer from .* \(not JSON: "):
        discover(None, "fused experts", kb, source="openalex")
    api.answer("/works", {"status": 400, "body": {"error": "Invalid query", "message": "Unknown filter x"}})
    with pytest.raises(UserError, match=r"^openalex: .*HTTP 400 Bad Request \(Unknown filter x\)$"):
        discover(None, "fused experts", kb, source="openalex")


def test_bad_discover_input_is_one_line(api: APIServer) -> None:
    kb = settings(api)
    with pytest.raises(UserError, match=r"^--since 2024-13-01: not a date"):
        discover(None, "fusion", kb, since="2024-13-01")
    with pytest.raises(UserError, match=r"^--since last week: not a date"):
        discover(None, "fusion", kb, since="last week")
    with pytest.raises(UserError, match="nothing to search for"):
        discover(None, "AND OR", kb, source="arxiv")
    assert api.calls == []


def test_discover_add_through_the_cli(tmp_path: Path, workspace: Workspace, api: APIServer) -> None:
    ws = set_kb_settings(
        workspace,
        fetch_timeout=5.0,
        arxiv_base=api.base,
        discovery=settings(api).discovery,
    )
    with LoopbackServer() as pages:
        pdf = pages.add("/oa/other.pdf", two_column_paper(), content_type="application/pdf")
        api.answer("/html/2505.01234", article_page(FUSION, ENGLISH_SECTIONS), content_type="text/html")
        works = [
            openalex_work(
                "W1", FUSION, doi="10.48550/arxiv.2505.01234", landing="https://arxiv.org/abs/2505.01234"
            ),
            openalex_work(
                "W2", "A paper whose PDF is missing from its server", pdf_url=pages.url("/gone.pdf")
            ),
            openalex_work("W3", OTHER, pdf_url=pdf, doi="10.1145/3600006.3613165"),
        ]
        api.answer("/works", openalex_page(works))
        runner = CliRunner(mix_stderr=False)
        args = ["--workspace", str(ws.root), "kb", "discover", "gate", "fusion", "--source", "openalex"]
        listed = runner.invoke(main, args)
        assert listed.exit_code == 0, listed.stderr
        assert f" 1. [new] {FUSION}" in listed.stdout
        assert (
            "Grace Hopper, Edsger Dijkstra" in listed.stdout
            and "2024-05-01, Proceedings of MLSys" in listed.stdout
        )
        before = db_dump(ws.db_path)
        added = runner.invoke(main, [*args, "--add", "3", "--json"])
        assert added.exit_code == 1  # one of the three failed, the other two are in
        data = json.loads(added.stdout)
        assert [r["status"] for r in data["added"]] == ["added", "error", "added"]
        assert "HTTP 404" in data["added"][1]["message"]
        assert added.stderr.strip().splitlines() == [f"Error: {data['added'][1]['message']}"]
        assert db_dump(ws.db_path) != before
        again = json.loads(runner.invoke(main, [*args, "--json"]).stdout)
        known = [c["known"] for c in again["candidates"]]
        assert known[0] is not None and known[1] is None and known[2] is not None
