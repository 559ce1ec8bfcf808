"""Paper ingestion: real trafilatura on pages with chrome, served over HTTP on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.config import KBSettings
from kb.db import rows
from kb.errors import UserError
from kb.papers import add_paper, add_papers, decode_html, expand_inputs, parse_arxiv, split_passages
from kb.search import search
from kb.workspace import Workspace
from tests.kb.helpers import (
    CHROME_TEXT,
    ENGLISH_SECTIONS,
    RUSSIAN_SECTIONS,
    LoopbackServer,
    article_page,
    db_dump,
    unused_port,
)

CODE = "if (ggml_can_fuse(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) {\n    fused = true;\n}"


def settings(**values: object) -> KBSettings:
    return KBSettings(**{"fetch_timeout": 5.0, **values})  # type: ignore[arg-type]


def passages(ws: Workspace, source_id: int) -> list[dict[str, object]]:
    return rows(
        ws.db(),
        "SELECT ref, section, position, title, body FROM evidence WHERE source_id = ? "
        "AND kind = 'passage' ORDER BY position",
        [source_id],
    )


def test_article_is_extracted_without_chrome(workspace: Workspace, http_server: LoopbackServer) -> None:
    url = http_server.add(
        "/posts/fusing",
        article_page(
            "Fusing ops in ggml", ENGLISH_SECTIONS, code=CODE, canonical="https://example.org/posts/fusing"
        ),
    )
    db = workspace.db()
    result = add_paper(db, url, settings())
    assert result.status == "added" and result.passages >= 2, result
    source = rows(db, "SELECT * FROM sources WHERE id = ?", [result.source_id])[0]
    assert source["title"] == "Fusing ops in ggml"
    assert source["authors"] == "Jane Doe"
    assert source["published"] == "2025-03-04"
    assert source["site"] == "Example Blog"
    assert source["canonical_url"] == "https://example.org/posts/fusing"
    assert source["language"] == "en"
    found = passages(workspace, result.source_id or 0)
    text = "\n".join(str(p["body"]) for p in found)
    for chrome in CHROME_TEXT:
        assert chrome not in text
    assert "Memory bandwidth, not arithmetic" in text
    # Headings and positions: a hypothesis can cite "paper P, section S, passage k".
    assert [p["position"] for p in found] == list(range(1, len(found) + 1))
    assert [p["ref"] for p in found] == [str(p["position"]) for p in found]
    assert {p["section"] for p in found} == {"Background", "Results"}
    results = next(p for p in found if p["section"] == "Results")
    assert "RMS_NORM with the following MUL" in str(results["body"])
    # The code block is kept verbatim, line breaks included.
    assert CODE in text


@pytest.mark.parametrize("identifier", ["ggml_can_fuse", "Q4_0_8x8", "_mm256_fmadd_ps", "GGML_OP_RMS_NORM"])
def test_code_identifiers_are_kept_and_searchable(
    workspace: Workspace, http_server: LoopbackServer, identifier: str
) -> None:
    url = http_server.add("/p", article_page("Kernels", ENGLISH_SECTIONS, code=CODE))
    db = workspace.db()
    result = add_paper(db, url, settings())
    text = "\n".join(str(p["body"]) for p in passages(workspace, result.source_id or 0))
    assert identifier in text
    assert "\\_" not in text  # no markdown escaping of underscores
    hits = search(db, identifier)
    assert hits and hits[0].kind == "paper" and hits[0].source_id == result.source_id
    assert f"**{identifier.lower()}**" in hits[0].snippet.lower()


def test_russian_article_is_as_searchable_as_english(
    workspace: Workspace, http_server: LoopbackServer
) -> None:
    url = http_server.add(
        "/ru",
        article_page(
            "Слияние операций в ggml", RUSSIAN_SECTIONS, lang="ru", author="Иван Петров", site="Блог"
        ),
    )
    db = workspace.db()
    result = add_paper(db, url, settings())
    assert result.status == "added"
    source = rows(db, "SELECT title, authors, language FROM sources WHERE id = ?", [result.source_id])[0]
    assert source == {"title": "Слияние операций в ggml", "authors": "Иван Петров", "language": "ru"}
    sections = {p["section"] for p in passages(workspace, result.source_id or 0)}
    assert sections == {"Введение", "Результаты"}
    for query in (
        "пропускную",
        "ПРОПУСКНУЮ способность",
        '"пропускную способность памяти"',
        "Оптимизация",
        "Q4_0_8x8",
        "ёмкая",
        "емкая",
        "Слиян*",
        "Результаты",
    ):
        hits = search(db, query)
        assert hits and hits[0].source_id == result.source_id, query
    assert search(db, "пропускную", kind="commit") == []


def test_readding_is_a_no_op(workspace: Workspace, http_server: LoopbackServer) -> None:
    page = article_page("Fusing ops in ggml", ENGLISH_SECTIONS, canonical="https://example.org/posts/fusing")
    first = http_server.add("/posts/fusing", page)
    db = workspace.db()
    added = add_paper(db, first, settings())
    before = db_dump(workspace.db_path)
    again = add_paper(db, first, settings())
    assert again.status == "exists" and again.source_id == added.source_id
    assert "already in the knowledge base" in again.message
    # Same canonical URL at another address (e.g. with tracking parameters).
    mirror = http_server.add("/posts/fusing?utm_source=feed", page)
    assert add_paper(db, mirror, settings()).status == "exists"
    # Same text, no canonical link, another URL: caught by the content hash.
    copy = http_server.add("/copy", article_page("Fusing ops in ggml", ENGLISH_SECTIONS))
    copied = add_paper(db, copy, settings())
    assert copied.status == "exists" and copied.source_id == added.source_id
    assert db_dump(workspace.db_path) == before


def test_redirects_are_followed(workspace: Workspace, http_server: LoopbackServer) -> None:
    final = http_server.add("/new", article_page("Moved article", ENGLISH_SECTIONS))
    old = http_server.add("/old", redirect="/new", status=301)
    db = workspace.db()
    result = add_paper(db, old, settings())
    assert result.status == "added"
    assert (
        rows(db, "SELECT canonical_url FROM sources WHERE id = ?", [result.source_id])[0]["canonical_url"]
        == final
    )
    assert http_server.requests == ["/old", "/new"]


def test_arxiv_links_map_to_one_paper(workspace: Workspace, http_server: LoopbackServer) -> None:
    http_server.add("/html/2401.01234v2", article_page("Operator fusion on CPUs", ENGLISH_SECTIONS))
    http_server.add("/html/2401.01234", article_page("Operator fusion on CPUs", ENGLISH_SECTIONS))
    kb = settings(arxiv_base=http_server.base)
    db = workspace.db()
    added = add_paper(db, "https://arxiv.org/abs/2401.01234", kb)
    assert added.status == "added"
    assert http_server.requests == ["/html/2401.01234"]  # the HTML version, never the PDF
    source = rows(db, "SELECT arxiv_id, canonical_url FROM sources WHERE id = ?", [added.source_id])[0]
    assert source == {"arxiv_id": "2401.01234", "canonical_url": "https://arxiv.org/abs/2401.01234"}
    for other in (
        "https://arxiv.org/pdf/2401.01234v2",
        "https://arxiv.org/html/2401.01234v2",
        "arxiv.org/abs/2401.01234v2",
        "https://arxiv.org/pdf/2401.01234.pdf",
        "arXiv:2401.01234v2",
    ):
        again = add_paper(db, other, kb)
        assert again.status == "exists" and again.source_id == added.source_id, other
    assert http_server.requests == ["/html/2401.01234"]


def test_arxiv_id_parsing() -> None:
    assert parse_arxiv("https://arxiv.org/abs/2401.01234v3").id == "2401.01234"  # type: ignore[union-attr]
    assert parse_arxiv("http://export.arxiv.org/abs/hep-th/9901001").id == "hep-th/9901001"  # type: ignore[union-attr]
    assert parse_arxiv("https://example.org/abs/2401.01234") is None


def test_arxiv_paper_without_html_or_pdf(workspace: Workspace, http_server: LoopbackServer) -> None:
    db = workspace.db()
    before = db_dump(workspace.db_path)
    with pytest.raises(
        UserError, match=r"arXiv 2402\.00001 has no HTML version, and its PDF failed: .*HTTP 404"
    ):
        add_paper(db, "https://arxiv.org/pdf/2402.00001", settings(arxiv_base=http_server.base))
    assert db_dump(workspace.db_path) == before


def test_local_files_and_folders(workspace: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "pages"
    (folder / "nested").mkdir(parents=True)
    for i in range(3):
        sections = [
            (f"Part {i}", [f"Paper number {i} studies cache blocking for kernel {i} in detail. " * 3])
        ]
        (folder / f"p{i}.html").write_text(article_page(f"Paper {i}", sections))
    (folder / "nested" / "deep.htm").write_text(article_page("Deep paper", ENGLISH_SECTIONS))
    (folder / "notes.txt").write_text("not a page")
    items = expand_inputs([str(folder)])
    assert [Path(i).name for i in items] == ["deep.htm", "p0.html", "p1.html", "p2.html"]
    seen: list[str] = []
    results = add_papers(workspace.db(), items, settings(), progress=lambda r: seen.append(r.status))
    assert seen == ["added"] * 4
    source = rows(workspace.db(), "SELECT url, canonical_url FROM sources WHERE title = 'Paper 1'")[0]
    assert source["url"] == str((folder / "p1.html").resolve())
    assert source["canonical_url"] == (folder / "p1.html").resolve().as_uri()
    assert [r.status for r in add_papers(workspace.db(), items, settings())] == ["exists"] * 4
    assert results[0].title == "Deep paper"
    (tmp_path / "text-only").mkdir()
    (tmp_path / "text-only" / "notes.txt").write_text("no pages here")
    with pytest.raises(UserError, match="no .html or .pdf files in this folder"):
        expand_inputs([str(tmp_path / "text-only")])
    with pytest.raises(UserError, match="no such file or folder"):
        expand_inputs([str(tmp_path / "missing")])


def test_passages_never_cross_headings_and_keep_size() -> None:
    sentence = "Cache blocking keeps the working set of the kernel inside the level two cache. "
    blocks = [
        ("head", 2, "Intro"),
        ("text", 0, sentence * 5),
        ("text", 0, sentence * 30),
        ("head", 3, "Detail"),
        ("text", 0, "short"),
        ("head", 2, "Next"),
        ("code", 0, "x\n" * 2000),
    ]
    found = split_passages(blocks, "Title", 400)
    assert [p.position for p in found] == list(range(1, len(found) + 1))
    assert all(len(p.text) <= 600 for p in found)
    sections = [p.section for p in found]
    assert sections[0] == "Intro" and "Intro > Detail" in sections and sections[-1] == "Next"
    assert [p.text for p in found if p.section == "Intro > Detail"] == ["short"]
    assert "".join(p.text for p in found if p.section == "Next").count("x") == 2000


# --- encodings ------------------------------------------------------------------------------------


def test_mislabelled_encoding_is_read_as_utf8_and_said(
    workspace: Workspace, http_server: LoopbackServer
) -> None:
    page = article_page("Слияние операций в ggml", RUSSIAN_SECTIONS, lang="ru", charset=None)
    url = http_server.add("/latin1", page.encode("utf-8"), content_type="text/html; charset=iso-8859-1")
    result = add_paper(workspace.db(), url, settings())
    assert result.status == "added"
    assert any("declared charset iso8859-1 but the bytes are UTF-8" in note for note in result.notes)
    assert result.title == "Слияние операций в ggml"


def test_declared_legacy_encoding_is_honoured(workspace: Workspace, http_server: LoopbackServer) -> None:
    page = article_page("Слияние операций в ggml", RUSSIAN_SECTIONS, lang="ru", charset="windows-1251")
    url = http_server.add("/cp1251", page.encode("cp1251"), content_type="text/html")
    result = add_paper(workspace.db(), url, settings())
    assert result.status == "added" and result.notes == []
    assert search(workspace.db(), "пропускную")[0].source_id == result.source_id


def test_decode_policy() -> None:
    assert decode_html("é".encode(), None, "x") == ("é", [])
    assert decode_html(b"\xef\xbb\xbf<p>bom</p>", "latin-1", "x") == ("<p>bom</p>", [])
    text, notes = decode_html("<p>é</p>".encode(), "utf-8", "x")
    assert notes == []
    text, notes = decode_html("<p>é</p>".encode(), "klingon", "x")
    assert text == "<p>é</p>" and "unknown charset 'klingon'" in notes[0]
    with pytest.raises(UserError, match="x: not valid UTF-8 .* no charset declared"):
        decode_html(b"<p>\xe9</p>", "klingon", "x")


# --- bad input: one line naming the input and the reason, nothing written --------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(200)


@pytest.mark.parametrize(
    ("path", "route", "kb", "message"),
    [
        (
            "/slow",
            {"body": article_page("Slow", ENGLISH_SECTIONS), "delay": 2.0},
            {"fetch_timeout": 0.5},
            "timed out after 0.5 s",
        ),
        (
            "/image.png",
            {"body": PNG, "content_type": "image/png"},
            {},
            r"not HTML or PDF \(image/png, binary content\)",
        ),
        (
            "/paper.pdf",
            {"body": b"%PDF-1.7\n" + bytes(100), "content_type": "application/pdf"},
            {},
            r"truncated PDF \(no %%EOF at its end",
        ),
        (
            "/data.bin",
            {"body": bytes(range(256)) * 4, "content_type": "application/octet-stream"},
            {},
            r"not HTML or PDF \(application/octet-stream, binary content\)",
        ),
        (
            "/no-type",
            {"body": bytes(range(256)), "content_type": None},
            {},
            r"not HTML or PDF \(unknown type",
        ),
        (
            "/json",
            {"body": b'{"a": 1}', "content_type": "application/json"},
            {},
            r"not HTML or PDF \(application/json\)",
        ),
        (
            "/big",
            {"body": article_page("Big", ENGLISH_SECTIONS) + "x" * 20_000},
            {"max_page_bytes": 10_000},
            "over the size cap of 10,000 bytes",
        ),
        (
            "/stream",
            {"body": "<html><body>", "stream_bytes": 2_000_000},
            {"max_page_bytes": 100_000},
            "over the size cap of 100,000 bytes",
        ),
        (
            "/bad-utf8",
            {"body": b"<html><body><p>caf\xe9 " + b"word " * 100 + b"\xff\xfe</p></body></html>"},
            {},
            r"invalid utf-8 text \(byte \d+\) and not UTF-8 either",
        ),
        (
            "/undeclared",
            {
                "body": "<html><body><p>café crème</p></body></html>".encode("latin-1"),
                "content_type": "text/html",
            },
            {},
            "not valid UTF-8 .* no charset declared",
        ),
        (
            "/chrome-only",
            {"body": "<html><body><nav><a href='/'>Home</a></nav><footer>© 2025</footer></body></html>"},
            {},
            "no extractable text",
        ),
        ("/missing", None, {}, "HTTP 404"),
    ],
)
def test_bad_pages_are_refused_and_change_nothing(
    workspace: Workspace,
    http_server: LoopbackServer,
    path: str,
    route: dict[str, object] | None,
    kb: dict[str, object],
    message: str,
) -> None:
    if route is not None:
        http_server.add(path, **route)  # type: ignore[arg-type]
    url = http_server.url(path)
    db = workspace.db()
    add_paper(db, http_server.add("/good", article_page("Good", ENGLISH_SECTIONS)), settings())
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError, match=message) as info:
        add_paper(db, url, settings(**kb))
    text = str(info.value)
    assert text.startswith(url + ":") and "\n" not in text
    assert db_dump(workspace.db_path) == before


def test_unreachable_host(workspace: Workspace) -> None:
    url = f"http://127.0.0.1:{unused_port()}/paper"
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError, match=r"cannot reach \(.*refused"):
        add_paper(workspace.db(), url, settings())
    assert db_dump(workspace.db_path) == before


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("paper.pdf", b"%PDF-1.5\n%binary" + bytes(50), r"truncated PDF \(no %%EOF at its end"),
        ("photo.html", PNG, "binary content"),
        ("empty.html", b"   \n", "empty file"),
        ("notes.txt", b"just some text", r"not HTML or PDF \(unknown type\)"),
    ],
)
def test_bad_local_files(
    workspace: Workspace, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError, match=message) as info:
        add_paper(workspace.db(), str(path), settings())
    assert str(info.value).startswith(str(path))
    assert db_dump(workspace.db_path) == before


def test_a_bad_page_in_a_folder_does_not_stop_the_rest(workspace: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.html").write_text(article_page("Good A", ENGLISH_SECTIONS))
    (folder / "b.html").write_bytes(PNG)
    (folder / "c.html").write_text(article_page("Good C", RUSSIAN_SECTIONS, lang="ru"))
    results = add_papers(workspace.db(), expand_inputs([str(folder)]), settings())
    assert [r.status for r in results] == ["added", "error", "added"]
    assert results[1].message.startswith(str(folder / "b.html"))
