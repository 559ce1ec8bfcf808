"""Reading lists: `kb add-paper URL --follow N` on a page served over 127.0.0.1 that links to an HTML
paper, a PDF, a dead link, non-http links and its own menus."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb.config import KBSettings
from kb.db import rows
from kb.papers.follow import follow
from kb.workspace import Workspace
from tests.kb.helpers import ENGLISH_SECTIONS, LoopbackServer, article_page, set_kb_settings
from tests.kb.pdf_support import TITLE, two_column_paper
from tui.cli import main

OTHER_SECTIONS = [
    ("Method", ["Fusing the norm into the multiply saves a full pass over the activations. " * 4])
]


def reading_list(extra: str = "") -> str:
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Reading list: fusing operators on CPUs</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About us</a></nav>
<article><h1>Reading list: fusing operators on CPUs</h1>
<p>Kernels that read the same data twice waste memory bandwidth; these papers show how to fuse
the passes. We keep this list short and annotate each entry with what it measured.</p>
<ul>
<li><a href="/papers/blocking.html">Cache blocking for fused kernels</a>, the HTML paper.</li>
<li><a href="/papers/fused.pdf">Fusing gate and up projections</a> (PDF).</li>
<li><a href="/papers/gone.html">A paper whose server moved</a>.</li>
<li>Write to <a href="mailto:lists@example.org">the list's editor</a>,
or run <a href="javascript:void(0)">the demo</a>.</li>
<li><a href="/papers/fused.pdf#page=2">The same PDF, page two</a>.</li>
{extra}
</ul>
<p>Every entry above was measured on a machine with two sockets and eight channels of memory.</p>
</article>
<footer><a href="/privacy">Privacy</a></footer></body></html>"""


def serve(server: LoopbackServer, extra: str = "") -> str:
    server.add("/papers/blocking.html", article_page("Cache blocking for fused kernels", ENGLISH_SECTIONS))
    server.add("/papers/fused.pdf", two_column_paper(), content_type="application/pdf")
    server.add("/about", article_page("About this blog and its many authors", ENGLISH_SECTIONS))
    return server.add("/list", reading_list(extra))


def test_follow_adds_the_page_and_its_papers(workspace: Workspace, http_server: LoopbackServer) -> None:
    url = serve(http_server)
    db = workspace.db()
    report = follow(db, url, KBSettings(fetch_timeout=5.0), 5)
    assert report.page.status == "added" and report.page.title == "Reading list: fusing operators on CPUs"
    by_link = {r.input: r for r in report.followed}
    assert list(by_link) == [
        http_server.url("/papers/blocking.html"),
        http_server.url("/papers/fused.pdf"),
        http_server.url("/papers/gone.html"),
    ]  # in the page's order; the PDF's #page=2 link is the same paper; menus are not followed
    assert by_link[http_server.url("/papers/blocking.html")].status == "added"
    pdf = by_link[http_server.url("/papers/fused.pdf")]
    assert pdf.status == "added" and pdf.title == TITLE
    dead = by_link[http_server.url("/papers/gone.html")]
    assert dead.status == "error" and dead.message.endswith("HTTP 404 Not Found")
    assert [(s.link, s.why) for s in report.skipped] == [
        ("mailto:lists@example.org", "not http(s) (mailto:)"),
        ("javascript:void(0)", "not http(s) (javascript:)"),
    ]
    assert report.summary() == (
        f"{url}: followed 3 links: 2 added, 0 already in the knowledge base, 1 failed; "
        "skipped 2 (1 not http(s) (mailto:); 1 not http(s) (javascript:))"
    )
    titles = [r["title"] for r in rows(db, "SELECT title FROM sources WHERE kind = 'paper' ORDER BY id")]
    assert titles == ["Reading list: fusing operators on CPUs", "Cache blocking for fused kernels", TITLE]
    assert "/about" not in http_server.requests and "/" not in http_server.requests
    # Each hop had the same rules: the dead link was asked once, the PDF once (its #page=2 link too).
    assert http_server.requests.count("/papers/fused.pdf") == 1
    again = follow(db, url, KBSettings(fetch_timeout=5.0), 5)
    assert again.page.status == "exists" and again.counts() == {"added": 0, "exists": 2, "error": 1}


def test_follow_limit_and_the_cli(tmp_path: Path, workspace: Workspace, http_server: LoopbackServer) -> None:
    url = serve(http_server, extra='<li><a href="https://arxiv.org/abs/2401.01234">An arXiv paper</a></li>')
    ws = set_kb_settings(workspace, fetch_timeout=5.0, arxiv_base=http_server.base)
    http_server.add(
        "/html/2401.01234", article_page("Operator fusion for memory bound inference", OTHER_SECTIONS)
    )
    runner = CliRunner(mix_stderr=False)
    result = runner.invoke(main, ["--workspace", str(ws.root), "kb", "add-paper", url, "--follow", "1"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("added paper 1: Reading list: fusing operators on CPUs")
    assert lines[1].startswith("  added paper 2: Cache blocking for fused kernels")
    assert f"  skipped: {http_server.url('/papers/fused.pdf')}: over --follow 1" in lines
    assert "  skipped: https://arxiv.org/abs/2401.01234: over --follow 1" in lines
    assert result.stderr.strip().endswith(
        "skipped 5 (3 over --follow 1; 1 not http(s) (mailto:); 1 not http(s) (javascript:))"
    )
    data = json.loads(
        runner.invoke(
            main, ["--workspace", str(ws.root), "kb", "add-paper", url, "--follow", "10", "--json"]
        ).stdout
    )
    [report] = data
    assert report["page"]["status"] == "exists"
    statuses = {r["input"]: r["status"] for r in report["followed"]}
    assert statuses["https://arxiv.org/abs/2401.01234"] == "added"  # read at arxiv_base, like any arXiv link
    assert report["counts"] == {"added": 2, "exists": 1, "error": 1}
    dead = runner.invoke(
        main, ["--workspace", str(ws.root), "kb", "add-paper", http_server.url("/nothing"), "--follow", "2"]
    )
    assert (
        dead.exit_code == 1
        and dead.stderr.strip() == f"Error: {http_server.url('/nothing')}: HTTP 404 Not Found"
    )
