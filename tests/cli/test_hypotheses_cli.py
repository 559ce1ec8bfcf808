"""`autoresearch hypotheses ...` and `autoresearch llm log` on a real workspace and KB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kb.db import one, rows
from kb.workspace import Workspace
from tests.runner.research_support import (
    KB,
    ScriptedLLM,
    Target,
    git,
    make_target,
    make_workspace,
    seed_kb,
    seed_wave,
)
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(ws: Workspace, *args: str) -> Result:
    return CliRunner().invoke(main, ["-w", str(ws.root), *args], catch_exceptions=False)


def setup(tmp_path: Path, **llm: Any) -> tuple[Target, Workspace, KB]:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target, **llm)
    return target, ws, seed_kb(ws, target)


def test_mine_list_show(tmp_path: Path) -> None:
    _, ws, kb = setup(tmp_path)
    result = run(ws, "hypotheses", "mine")
    assert result.exit_code == 0, result.output
    assert (
        "Added 1 backend-gap, 2 fork-commit and 0 pull-request hypotheses (1 fork patches do not apply"
        in result.output
    )
    assert run(ws, "hypotheses", "mine", "--json").output.count('"already_mined": 3') == 1

    listed = json.loads(run(ws, "hypotheses", "list", "--json").output)
    assert [h["title"][:30] for h in listed] == [
        "Port fastfork@" + listed[0]["title"][14:30],
        "Fuse RMS_NORM+MUL in the cpu b",
        "Port fastfork@" + listed[2]["title"][14:30],
    ]  # best first: the quant commit claims 12%
    assert listed[0]["apply_status"] == "ok" and listed[2]["apply_status"] == "conflict"
    table = run(ws, "hypotheses", "list").output
    # The outcome (the latest experiment's status) next to the status, the rank, the family.
    assert table.splitlines()[0].split() == [
        "id",
        "status",
        "outcome",
        "rank",
        "priority",
        "origin",
        "effect",
        "patch",
        "family",
        "title",
    ]
    assert "1-3 of 3 (sorted by rank)." in table

    gap_id = listed[1]["id"]
    shown = json.loads(run(ws, "hypotheses", "show", str(gap_id), "--json").output)
    assert {e["id"] for e in shown["evidence"]} == {kb.gap, *kb.fusions.values()}
    text = run(ws, "hypotheses", "show", str(gap_id)).output
    assert f"#{gap_id} [proposed] Fuse RMS_NORM+MUL in the cpu backend" in text and "Evidence:" in text


def test_steering_is_all_or_nothing(tmp_path: Path) -> None:
    _, ws, _ = setup(tmp_path)
    run(ws, "hypotheses", "mine")
    ids = [h["id"] for h in json.loads(run(ws, "hypotheses", "list", "--json").output)]
    bad = run(ws, "hypotheses", "approve", str(ids[0]), "999")
    assert bad.exit_code == 1 and bad.output.strip() == "Error: hypothesis 999: no such hypothesis"
    # The fork commit that conflicts even with a three-way merge waits as needs_port.
    assert run(ws, "hypotheses", "list", "--status", "proposed", "--json").output.count('"id"') == 2
    assert run(ws, "hypotheses", "list", "--status", "needs_port", "--json").output.count('"id"') == 1

    assert run(ws, "hypotheses", "approve", *map(str, ids)).exit_code == 0
    statuses = {h["id"]: h["status"] for h in json.loads(run(ws, "hypotheses", "list", "--json").output)}
    # A patch that applies makes an approved hypothesis `patched`; without one (or a conflict) `approved`.
    assert sorted(statuses.values()) == ["approved", "approved", "patched"]
    assert run(ws, "hypotheses", "reject", str(ids[1])).exit_code == 0
    assert run(ws, "hypotheses", "prioritize", str(ids[2]), "9.5").exit_code == 0
    listed = json.loads(run(ws, "hypotheses", "list", "--json").output)
    assert listed[0]["id"] == ids[2] and listed[0]["priority"] == 9.5
    assert {h["id"]: h["status"] for h in listed}[ids[1]] == "rejected"
    bad_status = run(ws, "hypotheses", "list", "--status", "maybe")
    assert bad_status.exit_code == 2 and "'maybe' is not one of" in bad_status.output


def test_generate_without_a_model_is_a_one_line_error(tmp_path: Path) -> None:
    _, ws, _ = setup(tmp_path)
    result = run(ws, "hypotheses", "generate")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: llm.model: no model configured (set llm.model in autoresearch.toml or pass --model)"
    )
    assert rows(ws.db(), "SELECT count(*) AS n FROM llm_calls") == [{"n": 0}]


def test_start_up_paths_never_import_litellm(tmp_path: Path) -> None:
    _, ws, _ = setup(tmp_path)
    probe = (
        "import sys, json\nfrom click.testing import CliRunner\nfrom tui.cli import main\n"
        f"w = {str(ws.root)!r}\n"
        "for args in (['--help'], ['hypotheses', '--help'], ['hypotheses', 'mine'], ['hypotheses', 'list'],"
        " ['llm', 'log'], ['hypotheses', 'reflect', '--help']):\n"
        "    r = CliRunner().invoke(main, ['-w', w, *args])\n"
        "    assert r.exit_code == 0, (args, r.output)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'litellm')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_generate_patch_reflect_and_the_log_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    target = make_target(tmp_path)
    path = "src/backend-cpu/ops-norm.c"
    (target.path / path).write_text(
        git(target.path, "show", f"HEAD:{path}") + "\nvoid rms_norm_mul(void) {}\n"
    )
    diff = git(target.path, "diff")
    git(target.path, "checkout", "--", path)
    ws = make_workspace(tmp_path, target)  # no model in the config: --model and --api-base give it
    kb = seed_kb(ws, target)

    def reply(body: dict[str, Any]) -> str:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "writing one patch" in system:
            return json.dumps({"summary": "fuse", "diff": diff})
        if "post-mortem" in system:
            return json.dumps(
                {"worked": ["fusion"], "noise": [], "next": ["softmax"], "summary": "Fusions pay."}
            )
        if "search queries" in user:
            return json.dumps({"queries": ["rms_norm fusion"]})
        return json.dumps(
            {
                "hypotheses": [
                    {
                        "title": "Fold the rms_norm scale into the multiply",
                        "rationale": "One pass over memory instead of two on a memory-bound path.",
                        "expected_effect": 0.03,
                        "risk": "drift",
                        "confidence": 0.5,
                        "evidence_ids": [kb.passage],
                    }
                ]
            }
        )

    with ScriptedLLM(reply) as server:
        flags = ["--model", server.litellm_model, "--api-base", server.base_url]
        generated = run(ws, "hypotheses", "generate", "--n", "2", "--focus", "rms_norm", *flags, "--json")
        assert generated.exit_code == 0, generated.output
        report = json.loads(generated.output)
        [hid] = report["added"]
        assert report["queries"] == ["rms_norm fusion", "rms_norm"]
        patched = run(ws, "hypotheses", "patch", str(hid), *flags, "--json")
        assert patched.exit_code == 0, patched.output
        assert [(o["hypothesis_id"], o["status"]) for o in json.loads(patched.output)] == [(hid, "patched")]
        assert run(ws, "hypotheses", "patch", *flags).output.startswith("No hypothesis needs a patch.")
        wave = seed_wave(ws, target.baseline, [hid])
        reflected = run(ws, "hypotheses", "reflect", str(wave), *flags)
        assert reflected.exit_code == 0 and "Fusions pay." in reflected.output

    log = json.loads(run(ws, "llm", "log", "--json").output)
    assert [c["purpose"] for c in log["calls"]] == ["reflect", "patch", "research", "queries"]
    assert log["total_calls"] == 4 and log["budget_usd"] == 5.0
    assert log["calls"][-1]["prompt"][0]["role"] == "system"
    table = run(ws, "llm", "log", "--limit", "2").output
    assert table.splitlines()[0].split()[:3] == ["id", "purpose", "model"]
    assert "4 calls, $0.0000 spent of $5.00 budget" in table
    assert "dummy-key-for-tests" not in (ws.root / "autoresearch.db").read_bytes().decode("utf-8", "replace")
    assert one(ws.db(), "SELECT status FROM hypotheses WHERE id = ?", [hid]) == {"status": "proposed"}


def test_a_spent_budget_stops_generate_with_a_clear_message(tmp_path: Path) -> None:
    _, ws, _ = setup(tmp_path, model="gpt-4o-mini", budget_usd=0.0)
    result = run(ws, "hypotheses", "generate")
    assert result.exit_code == 1
    assert result.output.startswith("Error: llm budget reached: $0.0000 spent of llm.budget_usd $0.00")
    log = run(ws, "llm", "log").output
    assert "llm budget reached" in log
