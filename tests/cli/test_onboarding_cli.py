"""No dead ends: `queue add` cites the knowledge base, empty results say what would fill them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.db import one, rows
from kb.init import TargetSpec, create_workspace
from kb.workspace import Workspace
from tests.conftest import make_repo
from tests.kb.helpers import ENGLISH_SECTIONS, LoopbackServer, article_page, db_dump
from tui.cli import main

PATCH = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-target\n+target, faster\n"


def another_patch(folder: Path, n: int) -> Path:
    """A patch of its own change (queue add refuses a change that waits in the queue already)."""
    path = folder / f"p{n}.patch"
    path.write_text(PATCH.replace("faster", f"faster {n}"))
    return path


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(main, ["--workspace", str(ws.root), *args])


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return create_workspace(tmp_path / "ws", TargetSpec(location=str(make_repo(tmp_path / "t"))))


@pytest.fixture
def paper(ws: Workspace, tmp_path: Path) -> dict[str, object]:
    """A paper added from a local HTML file (real trafilatura), as its sources row."""
    page = tmp_path / "fusion.html"
    page.write_text(article_page("Kernel fusion for memory-bound ops", ENGLISH_SECTIONS))
    assert cli(ws, "kb", "add-paper", str(page)).exit_code == 0
    found = one(ws.db(), "SELECT * FROM sources WHERE kind = 'paper'")
    assert found is not None
    return found


def _queued(ws: Workspace, result: Result) -> tuple[list[int], list[str]]:
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.output)
    db = ws.db()
    linked = [
        r["evidence_id"]
        for r in rows(
            db, "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [data["hypothesis"]]
        )
    ]
    refs = [
        r["ref"]
        for r in rows(db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ?", [data["hypothesis"]])
    ]
    return linked, refs


def test_queue_add_cites_a_paper_by_id_url_or_file_address(
    ws: Workspace, paper: dict[str, object], tmp_path: Path
) -> None:
    def first_passage(source_id: object) -> int:
        row = one(
            ws.db(),
            "SELECT id FROM evidence WHERE source_id = ? AND kind = 'passage' ORDER BY position, id LIMIT 1",
            [source_id],
        )
        assert row is not None
        return int(row["id"])

    # A file paper: by id, by its file:// address (what `kb papers` shows as its URL).
    assert str(paper["canonical_url"]).startswith("file://")
    for n, source in enumerate((f"paper:{paper['id']}", str(paper["canonical_url"]))):
        patch = another_patch(tmp_path, n)
        result = cli(ws, "queue", "add", str(patch), "-t", f"cite {source}", "--source", source, "--json")
        linked, refs = _queued(ws, result)
        assert linked == [first_passage(paper["id"])], source
        assert refs == [paper["canonical_url"]]
    # A web paper by its own URL.
    with LoopbackServer() as server:
        sections = [("Rooflines", ["Arithmetic intensity decides whether a kernel is memory-bound. " * 8])]
        url = server.add("/post", article_page("Roofline thinking", sections))
        added = cli(ws, "kb", "add-paper", url)
        assert added.exit_code == 0, added.stderr
    web = one(ws.db(), "SELECT * FROM sources WHERE kind = 'paper' AND url = ?", [url])
    assert web is not None
    patch = another_patch(tmp_path, 2)
    linked, refs = _queued(ws, cli(ws, "queue", "add", str(patch), "-t", "web", "--source", url, "--json"))
    assert linked == [first_passage(web["id"])] and refs == [url]
    # The provenance walk from the paper finds the hand-written hypotheses.
    from runner.record.winners import led_to

    walked = led_to(ws.db(), source_id=int(str(paper["id"])))
    assert len(walked["hypotheses"]) == 2
    patch = another_patch(tmp_path, 3)
    text = cli(ws, "queue", "add", str(patch), "-t", "again", "--source", f"paper:{paper['id']}")
    assert "cites   paper" in text.output and "Kernel fusion" in text.output


def test_queue_add_cites_evidence_and_refuses_unknown_ids(
    ws: Workspace, paper: dict[str, object], tmp_path: Path
) -> None:
    patch = tmp_path / "p.patch"
    patch.write_text(PATCH)
    passage = one(ws.db(), "SELECT id FROM evidence WHERE kind = 'passage' ORDER BY id DESC LIMIT 1")
    assert passage is not None
    linked, refs = _queued(
        ws, cli(ws, "queue", "add", str(patch), "-t", "t", "--source", f"evidence:{passage['id']}", "--json")
    )
    assert linked == [passage["id"]] and refs == [f"evidence:{passage['id']}"]
    before = db_dump(ws.db_path)
    for bad, message in (
        ("evidence:999", "no such evidence id"),
        ("paper:999", "no paper with this id"),
        (f"gap:{passage['id']}", "is a passage, not a gap"),
        ("file:///nowhere/paper.html", "no paper was added from this file"),
    ):
        result = cli(ws, "queue", "add", str(patch), "-t", "t", "--source", bad)
        assert result.exit_code == 1 and message in result.stderr, (bad, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert db_dump(ws.db_path) == before
    # A URL the knowledge base does not hold stays a free-form ref.
    patch = another_patch(tmp_path, 1)
    linked, refs = _queued(
        ws, cli(ws, "queue", "add", str(patch), "-t", "t", "--source", "https://example.org/x", "--json")
    )
    assert linked == [] and refs == ["https://example.org/x"]


def test_empty_results_say_what_fills_them(ws: Workspace, paper: dict[str, object]) -> None:
    listed = cli(ws, "hypotheses", "list")
    assert listed.exit_code == 0
    assert "hypotheses mine" in listed.output and "hypotheses generate" in listed.output
    assert "queue add PATCH" in listed.output and "--source paper:ID" in listed.output
    assert "Papers become hypotheses only through a model" in listed.output
    mined = cli(ws, "hypotheses", "mine")
    assert mined.exit_code == 0
    assert "Added 0" in mined.output and "No backend gaps" in mined.output and "No forks" in mined.output
    assert "kb add-fork NAME URL" in mined.output and "only through a model" in mined.output
    inv = cli(ws, "kb", "inventory")
    assert (
        inv.exit_code == 0
        and "No compute backends in" in inv.output
        and "[[kb.inventory.rules]]" in inv.output
    )


def test_queue_add_refuses_a_patch_that_does_not_apply_at_once(ws: Workspace, tmp_path: Path) -> None:
    stale = tmp_path / "stale.patch"  # written against another README
    stale.write_text("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-another text\n+faster\n")
    before = db_dump(ws.db_path)
    result = cli(ws, "queue", "add", str(stale), "-t", "stale")
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "does not apply to the baseline" in result.stderr and "--unchecked" in result.stderr
    assert db_dump(ws.db_path) == before  # nothing queued
    # --unchecked queues it anyway (a patch for a run's winners), runnable, with git's error kept.
    result = cli(ws, "queue", "add", str(stale), "-t", "stale", "--unchecked", "--json")
    assert result.exit_code == 0 and json.loads(result.output)["applies"] is False, result.stderr
    patch = one(ws.db(), "SELECT apply_status, apply_error FROM patches ORDER BY id DESC LIMIT 1")
    assert patch is not None and patch["apply_status"] == "unchecked" and "README.md" in patch["apply_error"]
    # One that applies is recorded as checked.
    good = tmp_path / "good.patch"
    good.write_text(PATCH)
    result = cli(ws, "queue", "add", str(good), "-t", "good", "--json")
    assert result.exit_code == 0 and json.loads(result.output)["applies"] is True
    patch = one(ws.db(), "SELECT apply_status FROM patches ORDER BY id DESC LIMIT 1")
    assert patch is not None and patch["apply_status"] == "ok"


def test_queue_add_refuses_the_same_change_while_it_waits_in_the_queue(ws: Workspace, tmp_path: Path) -> None:
    """mmh3's walk: the same patch file queued twice became two hypotheses, measured twice."""
    first = tmp_path / "unroll.patch"
    first.write_text(PATCH)
    assert cli(ws, "queue", "add", str(first), "-t", "unroll 4x").exit_code == 0
    # The same change with another header and title is the same change.
    again = tmp_path / "unroll-again.patch"
    again.write_text("diff --git a/README.md b/README.md\n" + PATCH)
    before = db_dump(ws.db_path)
    result = cli(ws, "queue", "add", str(again), "-t", "same again")
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "the same change as hypothesis 1 ('unroll 4x'), which is still in the queue" in result.stderr
    assert "hypotheses reject 1" in result.stderr
    assert db_dump(ws.db_path) == before
    # Rejected, it no longer holds the change: the new one takes its place.
    assert cli(ws, "hypotheses", "reject", "1").exit_code == 0
    result = cli(ws, "queue", "add", str(again), "-t", "same again", "--json")
    assert result.exit_code == 0, result.stderr
    assert (
        json.loads(result.output)["hypothesis"] == 2 and json.loads(result.output)["measured_before"] is None
    )
