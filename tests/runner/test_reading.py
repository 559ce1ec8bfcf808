"""The autopilot reads new literature: `run --autopilot --discover` on the runner's small C target,
the model played by a scripted OpenAI-compatible server on 127.0.0.1, arXiv's API and its HTML
papers by another server on 127.0.0.1. The model's query goes to discovery, the paper found is
ingested before the local search, its passage is shown to the model, and the hypothesis the model
writes cites it; the research log keeps what was read with its query. Off: nothing is asked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kb.db import one, rows
from kb.store.research_log import research_log
from kb.workspace import Workspace
from runner import autopilot
from runner.measure.run import RunOptions
from tests.kb.api_support import APIServer, arxiv_entry, atom_feed
from tests.kb.helpers import article_page
from tests.runner.autopilot_agent import FUSE, PATCHES
from tests.runner.research_support import ScriptedLLM
from tests.runner.runner_target import make_workspace, must

PAPER = "Fusing Warm-up Passes into the Measured Work of Hash Loops"
FINDING = "Folding the warm-up pass into the measured loop removes a full pass over the table"


class Reader:
    """The model: one query, then a hypothesis citing the passage of the paper discovery found."""

    def __init__(self) -> None:
        self.cited: int | None = None
        self.research_prompts: list[str] = []

    def __call__(self, body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        user = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        if "post-mortem" in system:
            summary = "The fusion paid off: memory traffic was the limit."
            return json.dumps({"worked": [FUSE], "noise": [], "next": [], "summary": summary})
        if "writing one patch" in system:
            return json.dumps({"summary": "fuse the warm-up", "diff": PATCHES[FUSE]})
        if "short full-text search queries" in user:
            return json.dumps({"queries": ["warm-up fusion hash loop"]})
        self.research_prompts.append(user)
        found = re.search(r'evidence id=(\d+) kind="passage"[^>]*>[^<]*?' + re.escape(FINDING[:40]), user)
        if found is None:
            return json.dumps({"hypotheses": []})
        self.cited = int(found.group(1))
        hypothesis = {
            "title": FUSE,
            "rationale": "The paper found for the query shows the warm-up re-reads the table: fold it in.",
            "expected_effect": 0.5,
            "risk": "low",
            "confidence": 0.7,
            "cost": 1.0,
            "evidence_ids": [self.cited],
        }
        return json.dumps({"hypotheses": [hypothesis]})


def workspace(tmp_path: Path, llm: ScriptedLLM, api: APIServer, **discovery: Any) -> Workspace:
    ws, _ = make_workspace(
        tmp_path,
        llm={"model": llm.litellm_model, "api_base": llm.base_url, "max_retries": 0},
        autopilot={"enabled": True, "repairs": 0, "patience": 1},
        kb={
            "arxiv_base": api.base,
            "fetch_timeout": 5.0,
            "discovery": {
                "arxiv_api": f"{api.base}/api/query",
                "arxiv_delay": 0.0,
                "per_query": 3,
                "per_phase": 1,
                **discovery,
            },
        },
    )
    return ws


def serve_arxiv(api: APIServer) -> None:
    feed = atom_feed(
        [arxiv_entry("2506.04321", PAPER), arxiv_entry("2506.09999", "A second paper, not read")]
    )
    api.answer("/api/query", feed, content_type="application/atom+xml")
    sections = [
        ("Method", [f"{FINDING}, so each hash is computed once while its bucket is still in cache. " * 2]),
        (
            "Results",
            ["On a memory-bound loop the fused version runs four times faster than the baseline. " * 2],
        ),
    ]
    api.answer("/html/2506.04321", article_page(PAPER, sections), content_type="text/html; charset=utf-8")
    second = [("Body", ["Nothing here is about warm-up passes or hash loops at all, but it is long. " * 3])]
    api.answer("/html/2506.09999", article_page("A second paper, not read", second), content_type="text/html")


def test_the_research_phase_reads_a_discovered_paper_and_cites_it(tmp_path: Path) -> None:
    model = Reader()
    with ScriptedLLM(model) as llm, APIServer() as api:
        serve_arxiv(api)
        ws = workspace(tmp_path, llm, api)
        lines: list[str] = []
        runner = autopilot.start(
            ws, RunOptions(self_test=False, final=False, waves=1, discover=True), progress=lines.append
        )
        summary = runner.execute()
    db = ws.db()
    # Discovery was asked the model's query, and read the first candidate only (per_phase = 1).
    [call] = [c for c in api.calls if c.path == "/api/query"]
    assert call.query["search_query"] == "all:warm-up AND all:fusion AND all:hash AND all:loop"
    paper = must(one(db, "SELECT * FROM sources WHERE kind = 'paper'"))
    assert (paper["title"], paper["arxiv_id"]) == (PAPER, "2506.04321")
    assert "/html/2506.09999" not in [c.path for c in api.calls]
    # Its passage reached the model before it answered, and the hypothesis cites it.
    assert model.cited is not None
    passage = must(one(db, "SELECT * FROM evidence WHERE id = ?", [model.cited]))
    assert passage["source_id"] == paper["id"] and FINDING in passage["body"]
    hypothesis = must(one(db, "SELECT * FROM hypotheses WHERE title = ?", [FUSE]))
    cited = rows(
        db, "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [hypothesis["id"]]
    )
    assert cited == [{"evidence_id": model.cited}]
    assert one(db, "SELECT status FROM experiments WHERE hypothesis_id = ?", [hypothesis["id"]]) is not None
    # The research log keeps what was read, with its query and source.
    [phase] = [p for p in research_log(db, summary.run_id) if p.discovered]
    assert phase.discovery.startswith("on (arxiv, --discover)")
    [read] = phase.discovered
    assert (read.query, read.source, read.status, read.paper, read.title) == (
        "warm-up fusion hash loop",
        "arxiv",
        "added",
        paper["id"],
        PAPER,
    )
    assert any(f"read {PAPER!r} (query 'warm-up fusion hash loop', arxiv)" in line for line in lines), lines


def test_no_discover_asks_nothing(tmp_path: Path) -> None:
    model = Reader()
    with ScriptedLLM(model) as llm, APIServer() as api:
        serve_arxiv(api)
        ws = workspace(tmp_path, llm, api)
        runner = autopilot.start(ws, RunOptions(self_test=False, final=False, waves=1, discover=False))
        summary = runner.execute()
    db = ws.db()
    assert api.calls == []
    assert one(db, "SELECT count(*) AS n FROM sources WHERE kind = 'paper'") == {"n": 0}
    phases = research_log(db, summary.run_id)
    assert phases and all(p.discovery == "off (--no-discover)" and not p.discovered for p in phases)
    assert model.cited is None


def test_auto_is_off_when_offline(tmp_path: Path, monkeypatch: Any) -> None:
    from kb.init import TargetSpec, create_workspace
    from runner.research.reading import discovery_state
    from tests.kb.helpers import unused_port
    from tests.runner.runner_target import make_target

    monkeypatch.delenv("AUTORESEARCH_OFFLINE")  # tests/conftest.py sets it for every other test
    target = make_target(tmp_path / "target")
    with APIServer() as api:
        ws = create_workspace(
            tmp_path / "ws",
            TargetSpec(
                location=str(target),
                extra={"kb": {"discovery": {"arxiv_api": f"{api.base}/api/query"}}},
            ),
        )
        assert discovery_state(ws, None) == (True, "on (arxiv, kb.discovery.enabled = auto)")
        monkeypatch.setenv("AUTORESEARCH_OFFLINE", "1")
        assert discovery_state(ws, None) == (False, "off: offline (AUTORESEARCH_OFFLINE is set)")
        assert discovery_state(ws, True)[0] is True  # --discover asks anyway
    monkeypatch.delenv("AUTORESEARCH_OFFLINE")
    dead = create_workspace(
        tmp_path / "ws2",
        TargetSpec(
            location=str(target),
            extra={"kb": {"discovery": {"arxiv_api": f"http://127.0.0.1:{unused_port()}/api/query"}}},
        ),
    )
    on, why = discovery_state(dead, None)
    assert not on and why.startswith("off: offline (127.0.0.1 cannot be reached (")
    assert discovery_state(dead, False) == (False, "off (--no-discover)")
