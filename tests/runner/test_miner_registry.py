"""A new miner is one module and one registration: its counts, label and skip reasons reach the
CLI's line and --json, the mine event the demo's summary reads, the research phase's count and the
summary's origin labels, with no field added anywhere for it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.research import miners
from tests.runner.research_support import make_target, make_workspace, seed_kb


@pytest.fixture
def tiny_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one registration line, as a new miner's author would add it to MINERS."""
    monkeypatch.setattr(miners, "MINERS", (*miners.MINERS, "tests.runner.tiny_miner:TinyMiner"))
    miners.miners.cache_clear()
    yield
    miners.miners.cache_clear()


def test_a_registered_miner_is_reported_everywhere_without_a_field_of_its_own(
    tmp_path: Path, tiny_registered: None
) -> None:
    from tui.cli import main

    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    kb = seed_kb(ws, target)
    cli = CliRunner(mix_stderr=False)

    result = cli.invoke(main, ["-w", str(ws.root), "hypotheses", "mine", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert list(report)[:3] == ["gap_added", "fork_added", "tiny_added"]
    [tiny] = report["tiny_added"]
    db = ws.db()
    assert db.execute("SELECT origin FROM hypotheses WHERE id = ?", [tiny]).fetchone()[0] == "miner:tiny"
    cited = db.execute(
        "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [tiny]
    ).fetchall()
    assert [r[0] for r in cited] == [kb.passage]

    # The mine event carries it the way the demo's summary reads every miner's ids.
    data = db.execute("SELECT data FROM events WHERE kind = 'hypotheses.mine' ORDER BY id DESC").fetchone()[0]
    assert tiny in miners.added_ids(json.loads(data))
    assert miners.label_of_origin("miner:tiny") == "multiply idea"  # the summary's origin column

    # Run again: nothing new, and the plain line names every miner by its label.
    again = cli.invoke(main, ["-w", str(ws.root), "hypotheses", "mine"], catch_exceptions=False)
    assert again.exit_code == 0
    first = again.output.splitlines()[0]
    assert first == "Added 0 backend-gap, 0 fork-commit and 0 multiply-idea hypotheses", again.output


def test_a_miners_skip_reasons_explain_an_empty_mine(tmp_path: Path, tiny_registered: None) -> None:
    from tui.cli import main

    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)  # no knowledge: every miner finds nothing
    result = CliRunner(mix_stderr=False).invoke(
        main, ["-w", str(ws.root), "hypotheses", "mine"], catch_exceptions=False
    )
    assert result.exit_code == 0
    assert "1 skipped: no paper passage speaks of a multiply (add one: `kb add-paper`)." in result.output
