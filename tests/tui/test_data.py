"""tui/data/ against the fixture workspace: every query the panes make, paging, and the writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.db import one, rows
from kb.errors import UserError
from tests.tui.fixtures import CLOCK_NOW, TuiFixture
from tui import data
from tui.spawn import RunRequest, _last_json


@pytest.fixture
def store(tui_template: TuiFixture) -> data.Store:
    return data.Store(tui_template.root)


def test_papers_and_the_reader_page(store: data.Store, tui_template: TuiFixture) -> None:
    with store.session() as db:
        page = data.papers(db, 0, 1)
        assert page.total == 2 and len(page.rows) == 1 and page.has_next
        assert page.rows[0].title == "Cache-aware attention kernels for CPU inference"  # newest first
        assert page.rows[0].passages == 60
        # Past the end: the last page, not an empty one.
        assert data.papers(db, 99, 1).offset == 1
        second = data.passages(db, tui_template.paper, 50, 50)
        assert [p.position for p in second.rows] == list(range(50, 60)) and second.total == 60
        # A cited passage opens on its page.
        assert data.passage_index(db, tui_template.passages[31]) == (tui_template.paper, 31)
        with pytest.raises(UserError, match="not a paper passage"):
            data.passage_index(db, tui_template.commits["tile"])


def test_commits_filter_by_path_fork_and_upstreamed(store: data.Store, tui_template: TuiFixture) -> None:
    with store.session() as db:
        everything = data.commits(db)
        assert everything.total == 4
        cpu = data.commits(db, path="ggml-cpu/")
        assert {c.subject for c in cpu.rows} == {
            "[CPU] Tile mul_mat for the L2 cache",
            "Vectorise ggml_vec_mul_f32 with AVX2",
        }
        # LIKE wildcards in the filter are literal.
        assert data.commits(db, path="ggml_cpu").total == 0
        assert data.commits(db, fork_id=tui_template.fork).total == 3
        assert data.commits(db, fork_id=tui_template.fork, hide_upstreamed=True).total == 2
        detail = data.commit(db, tui_template.commits["tile"])
        assert detail.diff.startswith("diff --git a/ggml/src/ggml-cpu/ops.cpp")
        assert detail.files == ["ggml/src/ggml-cpu/ops.cpp"] and not detail.upstreamed
        forks = {f.name: f for f in data.forks(db)}
        assert forks["llamafile"].commits == 3 and forks["llamafile"].upstreamed == 1


def test_fusion_matrix_marks_gaps_with_file_and_line(store: data.Store, tui_template: TuiFixture) -> None:
    with store.session() as db:
        matrix = data.fusion_matrix(db)
    assert matrix.backends == ["cpu", "cuda", "metal", "vulkan"]
    keys = [r.ops for r in matrix.rows]
    assert keys[:2] == ["ADD+RMS_NORM", "RMS_NORM+MUL"]  # rows with gaps first
    add = matrix.rows[0]
    assert add.missing == ["cpu", "metal"]
    assert add.cells["cuda"].where == "ggml/src/ggml-cuda/ggml-cuda.cu:2990"
    assert add.cells["cpu"].evidence_id == tui_template.gaps["cpu:ADD+RMS_NORM"]
    silu = matrix.rows[keys.index("UNARY:SILU+MUL")]
    assert all(c.state == "fused" for c in silu.cells.values())
    assert matrix.row_of(tui_template.fusions["vulkan:RMS_NORM+MUL"]) == 1


def test_search_hits_carry_highlight_marks(store: data.Store) -> None:
    with store.session() as db:
        hits = data.search(db, "AVX2")
    assert hits and hits[0].kind == "commit"
    assert data.SNIPPET_MARKS[0] + "AVX2" + data.SNIPPET_MARKS[1] in hits[0].snippet


def test_hypotheses_queue_and_detail(store: data.Store, tui_template: TuiFixture) -> None:
    with store.session() as db:
        proposed = data.hypotheses(db, "proposed")
        assert [h.id for h in proposed.rows] == tui_template.proposed  # priority 3 before 2.5
        assert proposed.rows[0].source == "fork+paper" and proposed.rows[1].source == "gap"
        fuse = data.hypotheses(db, limit=1).rows[0]
        assert fuse.outcome == "kept" and fuse.source == "gap+paper"
        detail = data.hypothesis(db, tui_template.proposed[0])
        assert {e.kind for e in detail.evidence} == {"passage", "commit"}
        assert detail.patch is None
        with pytest.raises(UserError, match="status 'maybe'"):
            data.hypotheses(db, "maybe")


def test_steering_writes(tmp_path: Path, tui_ws: Path, tui_template: TuiFixture) -> None:
    store = data.Store(tui_ws)
    hid = tui_template.proposed[0]
    with store.session() as db:
        assert data.approve(db, hid) == "approved"  # no patch yet
        assert data.change_priority(db, hid, 1) == 4.0
        assert data.change_priority(db, hid, -2.5) == 1.5
        assert one(db, "SELECT status, priority FROM hypotheses WHERE id = ?", [hid]) == {
            "status": "approved",
            "priority": 1.5,
        }
        assert data.reject(db, hid) == "rejected"
        kinds = [
            e["kind"]
            for e in rows(db, "SELECT kind FROM events WHERE message LIKE ?", [f"hypothesis {hid}:%"])
        ]
        assert kinds == [
            "hypothesis.approve",
            "hypothesis.prioritize",
            "hypothesis.prioritize",
            "hypothesis.reject",
        ]
        # Cancel: only a live experiment; the runner gets a command row.
        running = tui_template.live.exp["quant"]
        cid = data.cancel_experiment(db, running)
        assert one(db, "SELECT kind, target_kind, target_id, status FROM commands WHERE id = ?", [cid]) == {
            "kind": "cancel",
            "target_kind": "experiment",
            "target_id": running,
            "status": "pending",
        }
        before = one(db, "SELECT count(*) AS n FROM commands")
        with pytest.raises(UserError, match="already kept"):
            data.cancel_experiment(db, tui_template.live.exp["fuse"])
        with pytest.raises(UserError, match="no runner is driving it"):
            data.steer_run(db, "pause", tui_template.history.run_id, CLOCK_NOW)  # finished
        with pytest.raises(UserError, match="not paused"):
            data.steer_run(db, "resume", tui_template.live.run_id, CLOCK_NOW)
        # ... and a refused command leaves the database as it was.
        assert one(db, "SELECT count(*) AS n FROM commands") == before
        data.steer_run(db, "pause", tui_template.live.run_id, CLOCK_NOW)
        # An hour later the runner's heartbeat is stale: nothing to steer.
        with pytest.raises(UserError, match="no runner"):
            data.steer_run(db, "stop", tui_template.live.run_id, CLOCK_NOW + 3600)


def test_fleet_snapshot(store: data.Store, tui_template: TuiFixture) -> None:
    with store.session() as db:
        snap = data.fleet(db)
    assert snap.run is not None and snap.run.name == "r2" and snap.run.runner_live(CLOCK_NOW)
    assert not snap.run.runner_live(CLOCK_NOW + 60)
    assert [e.status for e in snap.experiments[:2]] == ["running", "queued"]
    running = snap.experiments[0]
    assert running.id == tui_template.live.exp["quant"] and running.phase == "bench"
    assert running.elapsed(CLOCK_NOW) == 125
    assert (
        running.log_path is not None
        and data.log_tail(running.log_path)[-1] == f"experiment {running.id}: running"
    )
    assert {w.name: w.experiment_id for w in snap.workers} == {"local-0": running.id, "local-1": None}


def test_log_reading(tmp_path: Path) -> None:
    log = tmp_path / "batch-0.log"
    log.write_text("".join(f"line {i}\n" for i in range(2000)) + "partial")
    assert data.log_tail(str(log), 3) == ["line 1998", "line 1999", "partial"]
    assert data.log_tail(str(log), 3, max_bytes=20) == ["line 1999", "partial"]  # the cut line dropped
    text, offset = data.read_log(str(log), 0)
    assert text.endswith("line 1999\n")  # the line still being written waits
    with open(log, "a") as fh:
        fh.write(" now complete\n")
    more, _ = data.read_log(str(log), offset)
    assert more == "partial now complete\n"
    assert data.log_tail(None) == [] and data.log_tail(str(tmp_path / "missing.log")) == []


def test_history_pages_and_chart(store: data.Store, tui_template: TuiFixture) -> None:
    run_id = tui_template.history.run_id
    with store.session() as db:
        page = data.run_experiments(db, run_id, 0, 5)
        assert page.total == 16 and [e.id for e in page.rows] == sorted(e.id for e in page.rows)
        kept = [e for e in data.run_experiments(db, run_id).rows if e.winner]
        assert {e.title for e in kept} == {
            "Fuse RMS_NORM and MUL on the CPU",
            "Unroll the Q4 quantize loop (ik_llama.cpp)",
        }
        assert all(e.ci_low is not None and e.ci_low > 0 for e in kept)
        series = data.metric_series(db, run_id)
        assert series.metric == "tg" and len(series.points) == 12
        fuse = next(p for p in series.points if p.experiment_id == tui_template.history.exp["fuse"])
        assert fuse.candidate is not None and fuse.baseline is not None and fuse.candidate > fuse.baseline
        result = data.redecide(db, run_id, min_effect=0.3)
        assert {i.experiment_id for i in result.flips} >= {tui_template.history.exp["fuse"]}
        with pytest.raises(UserError, match="min effect"):
            data.redecide(db, run_id, min_effect=30)


def test_run_request_arguments() -> None:
    assert RunRequest().args() == ["run", "--detach", "--json"]
    assert RunRequest(name="n1", waves=2, budget_minutes=1.5, skip_self_test=True).args() == [
        "run", "--detach", "--json", "--name", "n1", "--waves", "2", "--budget-minutes", "1.5",
        "--skip-self-test",
    ]  # fmt: skip
    assert RunRequest(resume=True, waves=3).args() == ["run", "--detach", "--json", "--resume"]
    assert _last_json('progress\n{\n  "pid": 1,\n  "run": 2\n}\n') == {"pid": 1, "run": 2}
    assert _last_json("no json here") is None
