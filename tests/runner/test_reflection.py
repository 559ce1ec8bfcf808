"""Reflection between waves: a KB note per wave, from the model or as a plain summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.db import one, rows
from kb.errors import UserError
from kb.search import search
from kb.workspace import Workspace
from runner.llm import LLMClient, LLMConfig
from runner.research.miners import mine
from runner.research.reflection import reflect_on_wave
from tests.runner.research_support import make_target, make_workspace, seed_kb, seed_wave

POST_MORTEM = json.dumps(
    {
        "worked": ["Fusing RMS_NORM+MUL: +4.1% [+1.8%, +6.4%]."],
        "noise": ["The quantize unroll: +0.4%, interval crosses zero, noise 3.3%."],
        "next": ["Fuse softmax scale and mask.", "Stop tuning the quantize loop."],
        "summary": "Memory-bound decode: fusing passes paid, loop tuning was noise.",
    }
)


def setup(tmp_path: Path) -> tuple[Workspace, int, list[int]]:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    db = ws.db()
    mined = mine(ws, db)
    ids = mined.added["gap"] + mined.added["fork"]
    return ws, seed_wave(ws, target.baseline, ids), ids


def mock_client(ws: Workspace, mocks: list[str], **config) -> LLMClient:  # type: ignore[no-untyped-def]
    return LLMClient(ws.db(), LLMConfig(model="gpt-4o-mini", **config), mock_responses=mocks, backoff_s=0)


def test_without_a_model_a_plain_summary_is_stored(tmp_path: Path) -> None:
    ws, wave, ids = setup(tmp_path)
    db = ws.db()
    evidence_id = reflect_on_wave(ws, db, wave)
    note = one(db, "SELECT * FROM evidence WHERE id = ?", [evidence_id])
    assert note is not None and note["kind"] == "note" and note["section"] == "reflection"
    body = note["body"]
    assert body.startswith("Wave 1 of run r1 (baseline ")
    assert "4 experiment(s)" in body
    assert (
        "Kept:\n- #1 Fuse RMS_NORM+MUL in the cpu backend: throughput +4.1% [+1.8%, +6.4%] over 24 pairs"
        in body
    )
    assert "Inconclusive (within noise):\n- #3 " in body and "over 80 pairs, noise 3.3%" in body
    assert "Crashed:\n- #4 experiment for None (build)" in body
    assert "Noise: run noise floor 2.1%; per-experiment noise 1.5% to 3.3%." in body
    assert json.loads(note["meta"])["author"] == "summary"
    source = one(db, "SELECT kind, canonical_url FROM sources WHERE id = ?", [note["source_id"]])
    assert source == {"kind": "note", "canonical_url": "autoresearch://run/1/wave/1/reflection"}
    assert one(db, "SELECT reflection_evidence_id AS e FROM waves WHERE id = ?", [wave]) == {"e": evidence_id}
    assert [h.id for h in search(db, "reflection wave", kind="note")] == [evidence_id]
    assert rows(db, "SELECT count(*) AS n FROM llm_calls") == [{"n": 0}]
    assert len(ids) == 3


def test_with_a_model_the_post_mortem_is_stored_with_the_facts(tmp_path: Path) -> None:
    ws, wave, _ = setup(tmp_path)
    db = ws.db()
    evidence_id = reflect_on_wave(ws, db, wave, client=mock_client(ws, [POST_MORTEM]))
    note = one(db, "SELECT body, meta FROM evidence WHERE id = ?", [evidence_id])
    assert note is not None
    assert note["body"].startswith("Memory-bound decode: fusing passes paid, loop tuning was noise.")
    assert (
        "What to try next:\n- Fuse softmax scale and mask.\n- Stop tuning the quantize loop." in note["body"]
    )
    assert "\nFacts:\nWave 1 of run r1" in note["body"]
    meta = json.loads(note["meta"])
    call = one(db, "SELECT id, purpose, run_id, prompt FROM llm_calls")
    assert call is not None and meta == {
        "author": "gpt-4o-mini",
        "llm_call_id": call["id"],
        "run_id": 1,
        "wave_id": wave,
    }
    assert call["purpose"] == "reflect"
    assert "Kept:" in json.loads(call["prompt"])[1]["content"]


def test_reflecting_again_replaces_the_note_in_place(tmp_path: Path) -> None:
    ws, wave, _ = setup(tmp_path)
    db = ws.db()
    first = reflect_on_wave(ws, db, wave)
    second = reflect_on_wave(ws, db, wave, client=mock_client(ws, [POST_MORTEM]))
    assert first == second
    assert one(db, "SELECT count(*) AS n FROM sources WHERE kind = 'note'") == {"n": 1}
    assert search(db, "softmax", kind="note")[0].id == first  # the FTS index follows the update


@pytest.mark.parametrize(
    ("mocks", "config", "why"),
    [
        (["I think it went well."], {}, "gave no valid answer"),
        ([POST_MORTEM], {"budget_usd": 0.0}, "llm budget reached"),
    ],
)
def test_model_trouble_falls_back_to_the_summary(tmp_path: Path, mocks, config, why) -> None:  # type: ignore[no-untyped-def]
    ws, wave, _ = setup(tmp_path)
    db = ws.db()
    evidence_id = reflect_on_wave(ws, db, wave, client=mock_client(ws, mocks, **config))
    note = one(db, "SELECT body, meta FROM evidence WHERE id = ?", [evidence_id])
    assert note is not None and note["body"].startswith("Wave 1 of run r1")
    assert "(model post-mortem unavailable: " in note["body"]
    assert why in note["body"] and why in json.loads(note["meta"])["error"]


def test_an_unknown_wave_is_a_user_error(tmp_path: Path) -> None:
    ws, _, _ = setup(tmp_path)
    with pytest.raises(UserError, match="wave 42: no such wave"):
        reflect_on_wave(ws, ws.db(), 42)
