"""`autoresearch history`, `report`, `redecide` and `import` on a real workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.runner.fixtures import EXPERIMENT_JSON_FIELDS, HistoryFixture, build_history, finished_history
from tui.cli import main

__all__ = ["finished_history"]  # a pytest fixture, imported to be used here

SAMPLE = Path(__file__).parent.parent / "runner" / "autoresearch.sample.jsonl"


def invoke(h: HistoryFixture, *args: str) -> Result:
    return CliRunner().invoke(main, ["--workspace", str(h.ws.root), *args], catch_exceptions=False)


def test_history_lists_runs_and_shows_one(finished_history: HistoryFixture) -> None:
    h = finished_history
    listing = invoke(h, "history")
    assert listing.exit_code == 0, listing.output
    header, row = listing.output.splitlines()[:2]
    assert header.split()[:3] == ["ID", "NAME", "STATUS"]
    assert row.split()[:3] == [str(h.run_id), "r1", "finished"]

    shown = invoke(h, "history", "--run", "r1")
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "Run 1 r1: finished" in out and "self-test passed: noise floor ±1." in out
    lines = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert "kept" in lines[str(h.exp["fuse"])] and "+5.71%" in lines[str(h.exp["fuse"])]
    assert "crashed: does_not_apply" in lines[str(h.exp["stale"])]
    assert f"1. {h.winners['fuse'].commit_sha[:12]}" in out
    assert "Samples of" not in out

    with_samples = invoke(h, "history", "--run", str(h.run_id), "--samples")
    assert f"Samples of #{h.exp['unroll']} Multiply by the reciprocal in softmax:" in with_samples.output


def test_history_json_carries_the_required_fields(finished_history: HistoryFixture) -> None:
    h = finished_history
    result = invoke(h, "history", "--run", "r1", "--json")
    assert result.exit_code == 0
    (run,) = json.loads(result.output)["runs"]
    for exp in run["experiments"]:
        assert exp.keys() >= EXPERIMENT_JSON_FIELDS
        assert isinstance(exp["samples"], list)
    everything = json.loads(invoke(h, "history", "--json").output)
    assert [r["name"] for r in everything["runs"]] == ["r1"]


def test_unknown_run_is_a_one_line_error(finished_history: HistoryFixture) -> None:
    for args in (["history", "--run", "zz"], ["report", "zz"], ["redecide", "zz"]):
        result = CliRunner().invoke(main, ["--workspace", str(finished_history.ws.root), *args])
        assert result.exit_code == 1
        assert result.output.strip().splitlines() == ["Error: run zz: no such run id or name (recent: r1)"]


def test_redecide_lists_flips_and_saves(tmp_path: Path) -> None:
    h = build_history(tmp_path)
    same = invoke(h, "redecide", "r1")
    assert same.exit_code == 0 and "0 flip(s)" in same.output

    strict = invoke(h, "redecide", "r1", "--min-effect", "0.05", "--json")
    data = json.loads(strict.output)
    assert h.exp["quant"] in data["flips"] and data["policy"]["min_effect"] == 0.05
    assert data["saved"] == 0

    text = invoke(
        h, "redecide", "r1", "--min-effect", "0.05", "--max-pairs", "40", "--alpha", "0.1", "--save"
    )
    assert text.exit_code == 0, text.output
    assert "(min_effect 5.00%, alpha 0.1, max_pairs 40)" in text.output
    assert (
        f"* #{h.exp['quant']} Unroll the Q4 quantize loop (ik_llama.cpp): keep -> inconclusive" in text.output
    )
    assert "saved 5 decisions (origin redecide)" in text.output
    # The run itself is unchanged: its experiments keep the statuses it decided.
    after = json.loads(invoke(h, "history", "--run", "r1", "--json").output)["runs"][0]
    quant = next(e for e in after["experiments"] if e["id"] == h.exp["quant"])
    assert quant["status"] == "kept" and quant["verdict"] == "keep"
    assert quant["decisions"][-1]["origin"] == "redecide"

    bad = CliRunner().invoke(main, ["--workspace", str(h.ws.root), "redecide", "r1", "--alpha", "3"])
    assert bad.exit_code == 1 and "alpha 3.0: must lie between 0 and 0.5" in bad.output


def test_report_writes_markdown_and_html(finished_history: HistoryFixture, tmp_path: Path) -> None:
    h = finished_history
    md = invoke(h, "report", "r1")
    assert md.exit_code == 0
    assert md.output.splitlines()[0] == f"Wrote {h.ws.reports_dir / 'r1.md'}"
    html_path = tmp_path / "r.html"
    html = invoke(h, "report", "r1", "--format", "html", "--output", str(html_path), "--json")
    assert json.loads(html.output) == {"report": str(html_path), "plot": str(tmp_path / "r.png")}
    assert "data:image/png;base64," in html_path.read_text()


def test_import_then_browse(tmp_path: Path) -> None:
    h = build_history(tmp_path)
    result = invoke(h, "import", str(SAMPLE))
    assert result.exit_code == 0, result.output
    assert (
        "Imported run 2 import-llama-cpp-cpu-tg-s0: 4 experiments, 1 kept (tg, higher is better)"
        in result.output
    )
    listing = invoke(h, "history").output
    assert "finished (imported)" in listing
    again = CliRunner().invoke(main, ["--workspace", str(h.ws.root), "import", str(SAMPLE)])
    assert again.exit_code == 1 and "already imported" in again.output

    bad = tmp_path / "bad.jsonl"
    bad.write_text(SAMPLE.read_text().replace('"description":"prefetch', '"description":3,"d":"prefetch'))
    failed = CliRunner().invoke(main, ["--workspace", str(h.ws.root), "import", str(bad), "--json"])
    assert failed.exit_code == 1
    assert failed.output.strip() == (
        f"Error: {bad}:3: description must be a string; nothing imported (--lenient skips malformed lines)"
    )
    assert len(json.loads(invoke(h, "history", "--json").output)["runs"]) == 3


@pytest.mark.parametrize("command", ["history", "redecide r1", "report r1 --format html"])
def test_real_process(finished_history: HistoryFixture, command: str) -> None:
    """The installed command line, in its own process, as a user runs it over SSH."""
    env = {**os.environ, "AUTORESEARCH_WORKSPACE": str(finished_history.ws.root)}
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", *command.split()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "r1" in done.stdout
