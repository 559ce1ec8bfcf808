"""The typed history API, history_json, and re-deciding a past run under another policy."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from kb.db import connect, insert, one, rows, transaction
from kb.errors import UserError
from kb.migrations import migrate
from runner.record import history
from runner.record.redecide import redecide, replay_wave
from runner.stats import Policy
from tests.runner.fixtures import (
    BLOG_URL,
    EXPERIMENT_JSON_FIELDS,
    HistoryFixture,
    add_run,
    build_history,
    finished_history,
)

__all__ = ["finished_history"]  # a pytest fixture, imported to be used here


def test_runs_waves_and_lookup(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    (run,) = history.runs(db)
    assert (run.name, run.status, run.metric, run.direction) == ("r1", "finished", "tg", "higher")
    assert (run.waves, run.experiments, run.winners) == (2, 16, 2)
    assert run.self_test is not None and run.self_test["passed"] is True
    assert run.noise_floor == pytest.approx(run.self_test["noise_floor"])
    assert run.summary is not None and run.summary["stack"]["experiment"] == h.exp["stack"]
    assert history.find_run(db, "r1") == history.find_run(db, h.run_id) == history.find_run(db, str(h.run_id))
    with pytest.raises(UserError, match=r"run nope: no such run id or name \(recent: r1\)"):
        history.find_run(db, "nope")
    waves = history.waves(db, h.run_id)
    assert [(w.number, w.status, w.experiments, w.kept) for w in waves] == [
        (1, "finished", 7, 1),
        (2, "finished", 5, 1),
    ]
    assert waves[1].baseline_commit == h.winners["fuse"].commit_sha  # wave 2 measures the new head


def test_experiments_carry_decision_hypothesis_sources_and_winner(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    exps = {e.id: e for e in history.experiments(db, h.run_id)}
    # one of each (an A/A fails in another test: the fixture's passes; a `conflict` needs an earlier
    # winner the candidate cannot be rebased onto, which the runner's tests make)
    assert {e.status for e in exps.values()} == set(history.FINISHED_STATUSES) - {"failed", "conflict"}
    fuse = exps[h.exp["fuse"]]
    assert (fuse.status, fuse.wave, fuse.pairs, fuse.decision and fuse.decision.verdict) == (
        "kept",
        1,
        16,
        "keep",
    )
    assert fuse.effect is not None and fuse.ci[0] is not None and fuse.ci[0] < fuse.effect < (fuse.ci[1] or 0)
    assert fuse.winner_commit == h.winners["fuse"].commit_sha
    assert fuse.sources == h.winners["fuse"].sources
    assert fuse.hypothesis_title == "Fuse RMS_NORM and MUL on the CPU"
    assert fuse.worker in ("local-0", "local-1")
    assert exps[h.exp["prefetch"]].sources == (BLOG_URL, "note:helped on one x86 box")
    assert exps[h.exp["unroll"]].pairs == 80 and exps[h.exp["unroll"]].decision.verdict == "inconclusive"  # type: ignore[union-attr]
    assert exps[h.exp["hang"]].reason == "timeout" and exps[h.exp["hang"]].decision is None
    assert exps[h.exp["retry"]].retry_of == h.exp["lost"]
    assert exps[h.exp["self_test"]].kind == "self_test" and exps[h.exp["self_test"]].hypothesis_id is None
    # The decisions of a sequential test: a look per batch, the last one final.
    looks = history.decisions(db, h.exp["quant"])
    assert [(d.verdict, d.pairs, d.is_final) for d in looks] == [("continue", 8, False), ("keep", 16, True)]
    # Filters.
    assert [e.id for e in history.experiments(db, h.run_id, kinds=["ablation"])] == [
        h.exp["ablation_fuse"],
        h.exp["ablation_quant"],
    ]
    assert {e.id for e in history.experiments(db, wave_id=h.waves[0], statuses=["crashed"])} == {
        h.exp["hang"],
        h.exp["nan"],
    }
    assert history.experiment(db, h.exp["fuse"]) == fuse
    with pytest.raises(UserError, match="experiment 999: no such experiment"):
        history.experiment(db, 999)


def test_a_page_of_experiments_is_a_slice_of_the_whole_list(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    everything = history.experiments(db, h.run_id)
    assert history.experiment_count(db, h.run_id) == len(everything) == 16
    page = history.experiments_page(db, h.run_id, 5, 4)
    assert page == [dataclasses.replace(e, sources=()) for e in everything[5:9]]
    assert history.experiments_page(db, h.run_id, 12, 10, with_sources=True) == everything[12:]
    assert history.experiments_page(db, h.run_id, 16, 4) == []
    assert history.experiment_count(db, h.run_id + 1) == 0
    # The runner's last word as raw rows: the same decisions the experiments carry.
    latest = history.latest_decision_rows(db, [e.id for e in everything])
    assert {k: history.DecisionInfo.from_row(r) for k, r in latest.items()} == {
        e.id: e.decision for e in everything if e.decision is not None
    }


def test_a_decision_record_is_its_stored_row_with_the_json_decoded(finished_history: HistoryFixture) -> None:
    """DecisionInfo carries the store's Decision (the decisions row's columns, declared once) and
    prints the JSON it always printed: the row's columns in their order, policy and metrics decoded,
    is_final a bool, then ci."""
    from kb.store.decisions import Decision

    h = finished_history
    db = h.db()
    exp = history.experiment(db, h.exp["fuse"])
    d = exp.decision
    assert isinstance(d, Decision) and d.is_final is True
    stored = history.latest_decision_rows(db, [exp.id])[exp.id]
    assert d.policy == stored["policy"] and d.decoded_policy == json.loads(stored["policy"] or "{}")
    assert d.metrics == stored["metrics"] and d.decoded_metrics == json.loads(stored["metrics"] or "{}")
    out = d.to_json()
    assert list(out) == [
        "id",
        "experiment_id",
        "verdict",
        "metric",
        "effect",
        "ci_low",
        "ci_high",
        "pairs",
        "p_value",
        "q_value",
        "noise",
        "reason",
        "policy",
        "metrics",
        "is_final",
        "origin",
        "created_at",
        "ci",
    ]
    assert out["policy"] == d.decoded_policy and out["metrics"] == d.decoded_metrics
    assert out["is_final"] is True and out["ci"] == [d.ci_low, d.ci_high]


def test_the_stores_decision_rule_is_historys(tmp_path: Path) -> None:
    """kb/store's decision of an experiment is history's (the reference): runner runs, an imported
    run, and re-analyses saved after every decision, which never count."""
    from kb.store import decisions
    from runner.record.importer import import_log

    h = build_history(tmp_path)
    db = h.db()
    import_log(db, Path(__file__).parent / "autoresearch.sample.jsonl")
    ids = [e.id for e in history.experiments(db)]
    with transaction(db):
        for eid in ids:
            decisions.record(
                db,
                {
                    "experiment_id": eid,
                    "verdict": "discard",
                    "metric": "tg",
                    "pairs": 99,
                    "is_final": 1,
                    "origin": "redecide",
                    "created_at": 0.0,
                },
            )
    reference = history.latest_decision_rows(db, ids)
    found = decisions.latest_of(db, ids)
    assert {k: r["id"] for k, r in reference.items()} == {k: d.id for k, d in found.items()}
    assert {d.origin for d in found.values()} == {"runner", "import"}
    assert all(decisions.latest(db, k) == d for k, d in found.items())


def test_history_json_has_every_required_field_and_raw_samples(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    data = json.loads(json.dumps(history.history_json(db)))  # JSON-serialisable as is
    (run,) = data["runs"]
    assert run["name"] == "r1" and len(run["waves"]) == 2 and len(run["winners"]) == 2
    required = EXPERIMENT_JSON_FIELDS | {"samples"}
    for exp in run["experiments"]:
        assert required <= exp.keys()
        assert Path(exp["log_dir"]).is_dir() and (Path(exp["log_dir"]) / "bench.log").exists()
    by_id = {e["id"]: e for e in run["experiments"]}
    fuse = by_id[h.exp["fuse"]]
    assert fuse["hypothesis"] == {"id": h.hyp["fuse"], "title": "Fuse RMS_NORM and MUL on the CPU"}
    assert fuse["ci"] == [fuse["decision"]["ci_low"], fuse["decision"]["ci_high"]]
    assert fuse["winner"]["commit"] == h.winners["fuse"].commit_sha
    assert [d["verdict"] for d in fuse["decisions"]] == ["continue", "keep"]
    # Raw samples: every stored row, none reduced.
    stored = db.execute("SELECT count(*) FROM samples").fetchone()[0]
    assert sum(len(e["samples"]) for e in run["experiments"]) == stored
    unroll = by_id[h.exp["unroll"]]
    tg_a = [s for s in unroll["samples"] if s["metric"] == "tg" and s["side"] == "A"]
    assert len(tg_a) == 80 * 3 and {s["seq"] for s in tg_a} == {0, 1, 2}
    assert by_id[h.exp["hang"]]["effect"] is None and by_id[h.exp["hang"]]["samples"] == []
    # One run only, and without samples.
    light = history.history_json(db, h.run_id, with_samples=False)
    assert "samples" not in light["runs"][0]["experiments"][0]


def test_pairs_take_the_median_of_an_invocation_and_skip_half_pairs(tmp_path: Path) -> None:
    h = build_history(tmp_path, commit_winners=False)
    db = h.db()
    eid = h.exp["unroll"]
    raw = history.samples(db, eid, "tg")
    base, cand = history.pairs(db, eid, "tg")
    assert len(base) == len(cand) == 80
    first_a = [s.value for s in raw if s.pair == 0 and s.side == "A"]
    assert len(first_a) == 3 and base[0] == statistics.median(first_a)
    # A pair interrupted after its A side is not a pair.
    with transaction(db):
        db.execute("DELETE FROM samples WHERE experiment_id = ? AND pair = 79 AND side = 'B'", [eid])
    base2, cand2 = history.pairs(db, eid, "tg")
    assert (base2, cand2) == (base[:79], cand[:79])
    assert history.metrics(db, eid) == ["pp", "tg"]


def test_live_run_shows_running_and_queued_experiments(tmp_path: Path) -> None:
    h = build_history(tmp_path, live=True)
    db = h.db()
    run = history.find_run(db, "r1")
    assert run.status == "running" and run.summary is None
    quant = history.experiment(db, h.exp["quant"])
    assert (quant.status, quant.phase, quant.finished) == ("running", "bench", False)
    assert quant.decision is not None and quant.decision.verdict == "continue" and quant.pairs == 8
    assert history.experiment(db, h.exp["retry"]).status == "queued"
    assert [w.status for w in history.waves(db, h.run_id)] == ["finished", "running"]
    # Events, read incrementally as a follower does.
    first = history.events(db, run_id=h.run_id, limit=3)
    rest = history.events(db, run_id=h.run_id, after_id=first[-1].id)
    assert [e.id for e in first + rest] == sorted(e.id for e in first + rest)
    assert any(e.kind == "sample_rejected" and e.level == "warning" for e in rest + first)


def test_two_runs_in_one_workspace(tmp_path: Path) -> None:
    h = build_history(tmp_path)
    second = add_run(h.ws, name="r2", seed=7)
    db = h.db()
    assert [r.name for r in history.runs(db)] == ["r1", "r2"]
    assert second.run_id != h.run_id and second.winners["fuse"].patch_file.name.startswith("0003-")
    assert len(history.history_json(db, second.run_id)["runs"]) == 1


# --- redecide ----------------------------------------------------------------------------------


def test_redecide_under_the_same_policy_flips_nothing(finished_history: HistoryFixture) -> None:
    h = finished_history
    result = redecide(h.db(), "r1")
    assert result.flips == []
    assert {i.experiment_id for i in result.items} == {
        h.exp[x] for x in ("fuse", "prefetch", "unroll", "quant", "retry")
    }
    assert {s["status"] for s in result.skipped} == {
        "checks_failed",
        "crashed",
        "refused",
        "cancelled",
        "lost",
    }
    stored = history.decisions(h.db(), h.exp["quant"])[-1]
    new = next(i for i in result.items if i.experiment_id == h.exp["quant"]).new
    assert (new.verdict, new.pairs) == (stored.verdict, stored.pairs)
    assert new.effect == pytest.approx(stored.effect) and new.q_value == pytest.approx(stored.q_value)


def test_redecide_lists_flips_and_saves_without_touching_the_run(tmp_path: Path) -> None:
    h = build_history(tmp_path)
    db = h.db()
    before_decisions = rows(db, "SELECT * FROM decisions ORDER BY id")
    before_status = rows(db, "SELECT id, status FROM experiments ORDER BY id")

    strict = redecide(db, "r1", min_effect=0.05)
    flips = {i.experiment_id: (i.old_verdict, i.new.verdict, i.short) for i in strict.flips}
    # +4.2% measured on 16 pairs cannot reach a 5% bar: the run stored no more pairs than that.
    assert flips[h.exp["quant"]] == ("keep", "inconclusive", True)
    assert h.exp["fuse"] not in flips  # +5.7% [+4.1%, +8.1%]: still a keep
    assert strict.policy.min_effect == 0.05 and strict.old_policy.min_effect == 0.01
    assert strict.saved == 0 and rows(db, "SELECT * FROM decisions ORDER BY id") == before_decisions

    capped = redecide(db, "r1", max_pairs=8)
    assert {i.experiment_id: i.new.pairs for i in capped.items}[h.exp["unroll"]] == 8
    assert all(i.new.verdict != "continue" for i in capped.items)

    saved = redecide(db, "r1", min_effect=0.05, save=True)
    assert saved.saved == len(saved.items) == 5
    assert rows(db, "SELECT id, status FROM experiments ORDER BY id") == before_status
    new_rows = rows(db, "SELECT * FROM decisions WHERE origin = 'redecide'")
    assert len(new_rows) == 5 and all(r["is_final"] == 0 for r in new_rows)
    assert json.loads(new_rows[0]["policy"])["min_effect"] == 0.05
    assert rows(db, "SELECT * FROM decisions WHERE origin != 'redecide' ORDER BY id") == before_decisions
    # The history still reports what the run decided.
    quant = history.experiment(db, h.exp["quant"])
    assert (
        quant.decision is not None and quant.decision.verdict == "keep" and quant.decision.origin == "runner"
    )
    assert history.decisions(db, h.exp["quant"])[-1].origin == "redecide"
    assert any(e.kind == "redecide" for e in history.events(db, run_id=h.run_id))


def test_redecide_rejects_bad_policies_and_runs(finished_history: HistoryFixture) -> None:
    db = finished_history.db()
    with pytest.raises(UserError, match="alpha 2.0"):
        redecide(db, "r1", alpha=2.0)
    with pytest.raises(UserError, match="min_pairs 2: must be at least 3"):
        redecide(db, "r1", max_pairs=2)
    with pytest.raises(UserError, match="run r9: no such run"):
        redecide(db, "r9")


def test_replay_stops_each_experiment_at_its_first_decisive_look() -> None:
    policy = Policy(min_pairs=8, batch=8, max_pairs=24)
    clear_win = ([100.0 + (i % 3) for i in range(24)], [110.0 + (i % 3) for i in range(24)])
    noise = ([100.0 + (i % 5) for i in range(24)], [100.0 + ((i + 2) % 5) for i in range(24)])
    looks = replay_wave({"win": clear_win, "flat": noise}, policy)
    assert [d.verdict for d in looks["win"]][-1] == "keep" and looks["win"][-1].pairs <= 16
    assert looks["flat"][-1].verdict in ("discard", "inconclusive")
    assert all(d.verdict == "continue" for d in looks["flat"][:-1])
    # Fewer stored pairs than the first look: judged once, as final.
    short = replay_wave({"x": ([1.0, 1.1, 0.9], [1.0, 1.2, 1.1])}, policy)
    assert [d.verdict for d in short["x"]] == ["inconclusive"] and short["x"][0].pairs == 3


def test_migration_backfills_the_hypothesis_of_existing_experiments(tmp_path: Path) -> None:
    db = connect(tmp_path / "old.db", migrate_schema=False)
    migrate(db, upto="m002_search")
    with transaction(db):
        hid = insert(db, "hypotheses", {"title": "h", "created_at": 1.0, "updated_at": 1.0})
        pid = insert(
            db,
            "patches",
            {
                "hypothesis_id": hid,
                "diff": "d",
                "diff_sha": "s",
                "files": [],
                "author_kind": "manual",
                "created_at": 1.0,
            },
        )
        rid = insert(db, "runs", {"name": "old", "status": "finished", "started_at": 1.0})
        eid = insert(db, "experiments", {"run_id": rid, "patch_id": pid, "title": "t", "created_at": 1.0})
        insert(
            db,
            "decisions",
            {"experiment_id": eid, "verdict": "keep", "metric": "m", "pairs": 8, "created_at": 1.0},
        )
    migrate(db)
    assert one(db, "SELECT hypothesis_id FROM experiments WHERE id = ?", [eid]) == {"hypothesis_id": hid}
    assert one(db, "SELECT origin FROM decisions") == {"origin": "runner"}
    assert history.experiment(db, eid).hypothesis_id == hid
