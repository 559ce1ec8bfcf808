"""Run reports: Markdown and HTML with the same content, a real PNG plot, provenance per winner."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kb.db import transaction, update
from kb.errors import UserError
from runner.record.importer import import_jsonl
from runner.record.report import write_report
from tests.runner.fixtures import FORK_SHA, PAPER_URL, HistoryFixture, build_history, finished_history
from tests.runner.onboarding_support import cli

__all__ = ["finished_history"]  # a pytest fixture, imported to be used here

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def table_row(text: str, first_cell: str, section: str = "## Experiments") -> list[str]:
    """The cells of the Markdown table row starting with `first_cell`, in the given section."""
    body = text.split(f"\n{section}\n", 1)[1].split("\n## ", 1)[0]
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r}")


def test_markdown_report_has_tables_plot_stack_and_provenance(finished_history: HistoryFixture) -> None:
    h = finished_history
    written = write_report(h.ws, h.db(), "r1")
    assert written.path == h.ws.reports_dir / "r1.md"
    assert written.plot == h.ws.reports_dir / "r1.png"
    png = written.plot.read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5_000
    text = written.path.read_text()

    assert text.startswith("# Run r1\n")
    assert "![Effect on tg per experiment](r1.png)" in text
    # Self-test and noise floor.
    assert re.search(r"A/A self-test: passed \(no difference\)", text)
    assert re.search(r"Noise floor: ±1\.\d\d%", text)
    # Waves and experiments, every experiment with its status; decided ones with effect, CI, pairs.
    assert table_row(text, "1", "## Waves")[:5] == ["1", h.baseline[:12], "finished", "7", "1"]
    assert table_row(text, "2", "## Waves")[1] == h.winners["fuse"].commit_sha[:12]  # the new head
    fuse = table_row(text, str(h.exp["fuse"]))
    assert fuse[3:9] == [
        "Fuse RMS_NORM and MUL on the CPU",
        "kept",
        "keep",
        "+5.71%",
        "[+4.06%, +8.06%]",
        "16",
    ]
    # The A/A row has the self-test's own word, never a candidate's verdict word; the legend under
    # the table says what each status shown means.
    aa_row = table_row(text, str(h.exp["self_test"]))
    assert aa_row[2:5] == ["self_test", "A/A self-test", "passed"]
    assert "- passed: A/A self-test: the baseline did not differ from itself" in text
    assert "- refused: touches a protected path, or tampered with the harness" in text
    assert "- conflict:" not in text  # only the statuses the table shows
    assert table_row(text, str(h.exp["hang"]))[4] == "crashed: timeout"
    assert table_row(text, str(h.exp["inflate"]))[4] == "refused: autoresearch.sh"
    assert table_row(text, str(h.exp["unroll"]))[5:9:3] == ["inconclusive", "80"]
    # The final stack and what each winner contributes.
    assert f"All winners together against the original baseline (#{h.exp['stack']}): +9." in text
    left_out_fuse = table_row(
        text, f"#{h.exp['fuse']} Fuse RMS_NORM and MUL on the CPU", "## Final stack and ablation"
    )
    # The ablation's effect is what the winner adds on top of the others (fixture: +5.5% true).
    assert left_out_fuse[1] == "kept" and left_out_fuse[2].startswith("+5.") and left_out_fuse[4] == "16"
    assert "what the winner adds on top of the others" in text
    # Provenance for each winner: commit, patch file, hypothesis, evidence with where to look.
    assert f"Commit: {h.winners['fuse'].commit_sha} on autoresearch/r1" in text
    assert f"Commit: {h.winners['quant'].commit_sha} on autoresearch/r1" in text
    assert "Patch file: patches/0001-fuse-rms-norm-and-mul-on-the-cpu.patch" in text
    assert "at ggml/src/ggml-cuda/ggml-cuda.cu:2931" in text
    assert PAPER_URL in text and f"fork:ik_llama.cpp@{FORK_SHA}" in text
    # Warnings of the run.
    assert "rejected sample: METRIC x=nan" in text


def test_html_report_embeds_the_plot_and_escapes_text(tmp_path: Path) -> None:
    h = build_history(tmp_path)
    db = h.db()
    with transaction(db):
        update(db, "experiments", h.exp["cancel"], {"title": "<script>alert(1)</script> & co"})
    out = tmp_path / "out" / "report.html"
    written = write_report(h.ws, db, h.run_id, fmt="html", output=out)
    assert written.path == out and written.plot == out.with_suffix(".png")
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in text
    (data,) = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert base64.b64decode(data) == written.plot.read_bytes()
    assert text.count("<table>") >= 4 and "Winners and provenance" in text
    # Markdown and HTML say the same things.
    md = write_report(h.ws, db, h.run_id).path.read_text()
    for needle in ("Fuse RMS_NORM and MUL on the CPU", h.winners["quant"].commit_sha, "+9.", "Noise floor"):
        assert needle in md and needle in text


def test_live_and_imported_runs_report_too(tmp_path: Path) -> None:
    h = build_history(tmp_path, live=True)
    db = h.db()
    text = write_report(h.ws, db, "r1").path.read_text()
    assert table_row(text, str(h.exp["quant"]))[4:6] == ["running", "continue"]
    assert "Final stack" not in text  # not reached yet
    log = Path(__file__).with_name("autoresearch.sample.jsonl")
    first, _ = import_jsonl(db, log)
    written = write_report(h.ws, db, first.name)
    imported = written.path.read_text()
    assert "Imported from: " in imported and "No winner in this run." in imported
    assert "No self-test was recorded" in imported
    assert written.plot is not None and written.plot.read_bytes().startswith(PNG_MAGIC)


def test_the_report_says_which_way_an_effect_is_better_and_an_unset_budget(tmp_path: Path) -> None:
    """sortedcontainers' walk: a time in ms (lower is better) kept at "+18.15%" under a plot axis
    "effect on add_remove_ms (%)" read as 18% slower; a run without a budget showed "Budget: "."""
    h = build_history(tmp_path)
    db = h.db()
    text = write_report(h.ws, db, "r1").path.read_text()
    assert "Effect: the gain in tg, + = better (higher tg is better)." in text
    run = db["runs"].get(h.run_id)
    policy = {**json.loads(run["policy"]), "direction": "lower"}
    with transaction(db):
        update(db, "runs", h.run_id, {"policy": json.dumps(policy), "budget": json.dumps({"minutes": None})})
    text = write_report(h.ws, db, "r1").path.read_text()
    assert "Effect: the gain in tg, + = better (lower tg is better)." in text
    assert "- Budget: none set\n" in text
    shown = cli("--workspace", str(h.ws.root), "history", "--run", "r1")
    assert shown.exit_code == 0 and "EFFECT: the gain in tg, + = better (lower tg is better)" in shown.output


def test_report_errors_are_one_line(finished_history: HistoryFixture, tmp_path: Path) -> None:
    h = finished_history
    with pytest.raises(UserError, match="run nope: no such run"):
        write_report(h.ws, h.db(), "nope")
    with pytest.raises(UserError, match="is a folder"):
        write_report(h.ws, h.db(), "r1", output=tmp_path)
    with pytest.raises(UserError, match="format 'pdf'"):
        write_report(h.ws, h.db(), "r1", fmt="pdf")


def test_importing_the_report_module_does_not_import_matplotlib() -> None:
    code = (
        "import sys, runner.record.report, runner.record.history, runner.record.winners; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
