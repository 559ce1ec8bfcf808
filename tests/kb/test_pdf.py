"""PDF papers: a two-column paper written by the test (tests/kb/pdf_support.py), read back in
reading order with page numbers through the real pdfminer.six child process; hostile and broken
PDFs refused with one line and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.config import KBSettings
from kb.db import rows
from kb.errors import UserError
from kb.papers import add_paper
from kb.workspace import Workspace
from tests.kb.helpers import ENGLISH_SECTIONS, LoopbackServer, article_page, db_dump
from tests.kb.pdf_support import TITLE, bomb, two_column_paper
from tui.cli import main


def settings(**values: object) -> KBSettings:
    return KBSettings(**{"fetch_timeout": 5.0, **values})  # type: ignore[arg-type]


def stored(ws: Workspace, source_id: int) -> list[dict[str, object]]:
    return rows(
        ws.db(),
        "SELECT id, position, section, body, meta FROM evidence WHERE source_id = ? AND kind = 'passage' "
        "ORDER BY position",
        [source_id],
    )


def test_two_column_pdf_reads_in_order_with_pages(workspace: Workspace, http_server: LoopbackServer) -> None:
    url = http_server.add("/papers/fused.pdf", two_column_paper(), content_type="application/pdf")
    db = workspace.db()
    result = add_paper(db, url, settings(passage_chars=400))
    assert result.status == "added", result
    assert result.title == TITLE
    assert "PDF, 2 pages" in result.message
    found = stored(workspace, result.source_id or 0)
    text = "\n".join(str(p["body"]) for p in found)
    # Reading order: the left column before the right, the right before page 2, although the
    # content stream draws right and left lines alternately and the table before the text.
    order = [
        "Mixture of experts layers read the gate",
        "Prompt processing on the CPU is bound",
        "Each pass streams every expert weight",
        "The fused kernel computes gate and up",
        "the second intermediate buffer disappears",
        "Prompt processing gains 12 percent",
        "model | baseline t/s | fused t/s",
    ]
    positions = [text.index(phrase) for phrase in order]
    assert positions == sorted(positions), text
    # The sentence broken by the page is whole, in one passage that carries both pages.
    broken = next(p for p in found if "the fused kernel reads the weights once" in str(p["body"]))
    assert json.loads(str(broken["meta"])) == {"pages": [1, 2]}
    assert broken["section"] == "2 Method"
    shown = CliRunner().invoke(main, ["-w", str(workspace.root), "kb", "show", str(broken["id"])])
    assert shown.exit_code == 0 and "pages:    1-2" in shown.output.splitlines()
    # The table is read row by row, on page 2, under its section.
    table = next(p for p in found if "dense 7B | 41.0 | 45.9" in str(p["body"]))
    assert "moe 30B | 88.2 | 96.1" in str(table["body"])
    assert json.loads(str(table["meta"]))["pages"] == [2, 2]
    assert table["section"] == "3 Results"
    first = found[0]
    assert json.loads(str(first["meta"])) == {"pages": [1, 1]} and first["section"] is None
    # The footer's page numbers are not text of the paper.
    assert all(str(p["body"]).strip() not in ("1", "2") for p in found)
    assert not any(body.endswith(" 1") for body in text.split("\n\n"))


def test_pdf_file_and_its_web_page_are_one_paper(
    workspace: Workspace, http_server: LoopbackServer, tmp_path: Path
) -> None:
    pdf = tmp_path / "fused.pdf"
    pdf.write_bytes(two_column_paper())
    db = workspace.db()
    first = add_paper(db, str(pdf), settings())
    assert first.status == "added"
    # The same paper as a web page at an unrelated address: its title is the same words.
    page = http_server.add("/blog/fusing", article_page(TITLE, ENGLISH_SECTIONS))
    again = add_paper(db, page, settings())
    assert again.status == "exists" and again.source_id == first.source_id, again
    # A page naming its PDF (citation_pdf_url), added before that PDF: the PDF is the same paper.
    pdf_url = http_server.add("/other/paper.pdf", two_column_paper().replace(b"Fusing", b"Fusion"))
    landing = article_page("A different landing page about blocking", ENGLISH_SECTIONS).replace(
        "<head>", '<head><meta name="citation_pdf_url" content="/other/paper.pdf">'
    )
    http_server.add("/landing", landing)
    added = add_paper(db, http_server.url("/landing"), settings())
    assert added.status == "added"
    same = add_paper(db, pdf_url, settings())
    assert same.status == "exists" and same.source_id == added.source_id
    assert "/other/paper.pdf" not in http_server.requests  # known by its address: never fetched


def test_arxiv_without_html_falls_back_to_the_pdf(workspace: Workspace, http_server: LoopbackServer) -> None:
    http_server.add("/pdf/2402.00001", two_column_paper(), content_type="application/pdf")
    db = workspace.db()
    result = add_paper(db, "https://arxiv.org/abs/2402.00001", settings(arxiv_base=http_server.base))
    assert result.status == "added", result
    assert http_server.requests == ["/html/2402.00001", "/pdf/2402.00001"]
    assert any("no HTML version" in note and "read its PDF" in note for note in result.notes)
    source = rows(db, "SELECT arxiv_id, canonical_url FROM sources WHERE id = ?", [result.source_id])[0]
    assert source == {"arxiv_id": "2402.00001", "canonical_url": "https://arxiv.org/abs/2402.00001"}
    assert add_paper(
        db, "https://arxiv.org/pdf/2402.00001v1", settings(arxiv_base=http_server.base)
    ).status == ("exists")


def test_pdf_bomb_is_refused_in_one_line(workspace: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "bomb.pdf"
    path.write_bytes(bomb(2048))
    assert path.stat().st_size < 100_000  # a small file that inflates to 2 GB
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError) as caught:
        add_paper(workspace.db(), str(path), settings(pdf_memory_mb=256))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: reading the PDF needs more than 256 MB")
    assert db_dump(workspace.db_path) == before


def test_truncated_and_fake_pdfs_are_refused_in_one_line(
    workspace: Workspace, http_server: LoopbackServer, tmp_path: Path
) -> None:
    whole = two_column_paper()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[: len(whole) // 2])
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError, match=r"cut\.pdf: truncated PDF \(no %%EOF at its end"):
        add_paper(workspace.db(), str(cut), settings())
    # Complete on the outside, garbage inside: the reader's reason in one line.
    garbage = b"%PDF-1.7\n" + b"\x00garbage" * 100 + b"\n%%EOF\n"
    url = http_server.add("/garbage.pdf", garbage, content_type="application/pdf")
    with pytest.raises(UserError) as caught:
        add_paper(workspace.db(), url, settings())
    assert str(caught.value).startswith(f"{url}: not a readable PDF (") and "\n" not in str(caught.value)
    assert db_dump(workspace.db_path) == before


def test_a_pdf_that_reads_too_long_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "slow.pdf"
    path.write_bytes(two_column_paper())
    before = db_dump(workspace.db_path)
    with pytest.raises(
        UserError, match=r"slow\.pdf: reading the PDF took longer than 0\.01 s \(kb\.pdf_seconds\); refused$"
    ):
        add_paper(workspace.db(), str(path), settings(pdf_seconds=0.01))
    assert db_dump(workspace.db_path) == before
