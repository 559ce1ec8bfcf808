"""kb/store's writes and the reads the loop relies on, on a real workspace database (made as
`autoresearch init` makes it): the decision rule, insert-or-ignore samples, meta merges, partial
updates, run names, and that no store function commits on its own."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
import sqlite_utils

from kb.db import transaction
from kb.errors import UserError
from kb.store import decisions, experiments, jobs, run_records, samples, waves
from kb.store.decisions import NewDecision
from kb.workspace import Workspace

T = 1_767_225_600.0


@pytest.fixture
def db(workspace: Workspace) -> sqlite_utils.Database:
    return workspace.db()


def _run(db: sqlite_utils.Database, name: str = "r1", **values: Any) -> int:
    return run_records.create(db, {"name": name, "status": "finished", "started_at": T, **values})  # type: ignore[typeddict-item]


def _experiment(db: sqlite_utils.Database, run_id: int, **values: Any) -> int:
    return experiments.create(db, {"run_id": run_id, "title": "t", "created_at": T, **values})  # type: ignore[typeddict-item]


def _decide(db: sqlite_utils.Database, exp_id: int, pairs: int, **values: Any) -> int:
    new: NewDecision = {"experiment_id": exp_id, "verdict": "continue", "metric": "tg", "pairs": pairs}
    return decisions.record(db, {**new, "created_at": T + pairs, **values})  # type: ignore[typeddict-item]


# --- decisions -----------------------------------------------------------------------------------


def test_the_decision_is_the_final_one_and_never_a_reanalysis(db: sqlite_utils.Database) -> None:
    exp = _experiment(db, _run(db))
    assert decisions.latest(db, exp) is None
    first = _decide(db, exp, 8)
    assert decisions.latest(db, exp).id == first  # type: ignore[union-attr]
    final = _decide(db, exp, 16, verdict="keep", is_final=1)
    # A later look that is not final (as no loop writes, but a row could hold) does not win over it.
    _decide(db, exp, 24)
    _decide(db, exp, 32, verdict="discard", is_final=1, origin="redecide")
    found = decisions.latest(db, exp)
    assert found is not None and (found.id, found.verdict, found.origin) == (final, "keep", "runner")
    assert decisions.latest_of(db, [exp]) == {exp: found}


def test_an_imported_verdict_counts_and_the_runner_comes_first(db: sqlite_utils.Database) -> None:
    run = _run(db)
    imported, both = _experiment(db, run), _experiment(db, run)
    verdict = _decide(db, imported, 1, verdict="keep", is_final=1, origin="import")
    assert decisions.latest(db, imported).id == verdict  # type: ignore[union-attr]
    runner = _decide(db, both, 8, verdict="discard", is_final=1)
    _decide(db, both, 1, verdict="keep", is_final=1, origin="import")
    assert decisions.latest(db, both).id == runner  # type: ignore[union-attr]


def test_latest_of_many_experiments(db: sqlite_utils.Database) -> None:
    """More experiments than SQLite binds in one statement; those without a decision are left out."""
    run = _run(db)
    with transaction(db):
        ids = [_experiment(db, run) for _ in range(1200)]
        wanted = {eid: _decide(db, eid, 8) for eid in ids[::3]}
    found = decisions.latest_of(db, ids)
    assert {eid: d.id for eid, d in found.items()} == wanted


def test_has_runner_look(db: sqlite_utils.Database) -> None:
    exp = _experiment(db, _run(db))
    _decide(db, exp, 8)
    _decide(db, exp, 16, origin="redecide")
    assert decisions.has_runner_look(db, exp, 8, False)
    assert not decisions.has_runner_look(db, exp, 8, True)
    assert not decisions.has_runner_look(db, exp, 16, False)  # a re-analysis is no look of the loop


# --- samples -------------------------------------------------------------------------------------


def _sample(exp: int, pair: int, side: str, value: float, seq: int = 0) -> samples.NewSample:
    return {
        "experiment_id": exp,
        "pair": pair,
        "side": side,
        "metric": "tg",
        "seq": seq,
        "value": value,
        "created_at": T,
    }


def test_samples_are_written_once(db: sqlite_utils.Database) -> None:
    exp = _experiment(db, _run(db))
    assert samples.insert_new(db, _sample(exp, 0, "A", 41.0))
    assert not samples.insert_new(db, _sample(exp, 0, "A", 99.0))  # parsed again: the first stays
    assert samples.stored_value(db, exp, 0, "A", "tg", 0) == 41.0
    assert samples.stored_value(db, exp, 0, "B", "tg", 0) is None
    with pytest.raises(sqlite3.IntegrityError):
        samples.insert(db, _sample(exp, 0, "A", 41.0))


def test_samples_by_pair_in_seq_order(db: sqlite_utils.Database) -> None:
    exp = _experiment(db, _run(db))
    for s in (_sample(exp, 1, "B", 3.0, 1), _sample(exp, 1, "B", 2.0, 0), _sample(exp, 0, "A", 1.0)):
        samples.insert(db, s)
    assert samples.by_pair(db, exp, "tg") == {0: {"A": [1.0]}, 1: {"B": [2.0, 3.0]}}
    assert samples.by_pair(db, exp, "pp") == {}
    assert samples.metrics(db, exp) == ["tg"]
    samples.delete_of_experiment(db, exp)
    assert samples.by_pair(db, exp, "tg") == {}


# --- experiments ---------------------------------------------------------------------------------


def test_an_experiment_takes_the_table_defaults(db: sqlite_utils.Database) -> None:
    exp = experiments.row(db, _experiment(db, _run(db)))
    assert exp is not None and (exp["status"], exp["kind"], exp["batches"], exp["phase"]) == (
        "queued",
        "candidate",
        0,
        None,
    )


def test_merge_meta_merges_mappings_one_key_deep(db: sqlite_utils.Database) -> None:
    exp = _experiment(db, _run(db), meta={"seconds": {"build": 1.0}, "wall": {"0": {"A": 1.0}}, "role": "x"})
    experiments.merge_meta(db, exp, {"seconds": {"bench": 2.0}, "wall": {"1": {"A": 2.0}}, "role": "y"})
    row = experiments.row(db, exp)
    assert row is not None
    assert json.loads(row["meta"]) == {
        "seconds": {"build": 1.0, "bench": 2.0},
        "wall": {"0": {"A": 1.0}, "1": {"A": 2.0}},
        "role": "y",
    }
    with pytest.raises(UserError, match="no such experiment"):
        experiments.merge_meta(db, exp + 1, {"role": "z"})


def test_finish_ends_the_phase_and_ids_filter_by_status(db: sqlite_utils.Database) -> None:
    run = _run(db)
    wave = waves.create(db, {"run_id": run, "number": 1, "baseline_commit": "b", "started_at": T})
    running = _experiment(db, run, wave_id=wave, status="running", phase="bench")
    queued = _experiment(db, run, wave_id=wave)
    _experiment(db, run, wave_id=wave, kind="stack")
    experiments.finish(db, running, "kept", None, T + 5)
    row = experiments.row(db, running)
    assert row is not None and (row["status"], row["phase"], row["ended_at"]) == ("kept", None, T + 5)
    assert experiments.ids_of_run(db, run, ["queued", "running"]) == [queued, queued + 1]
    assert experiments.ids_of_wave(db, wave, "candidate", ["kept", "queued"]) == [running, queued]
    assert [e["id"] for e in experiments.of_run(db, run)] == [running, queued, queued + 1]


# --- jobs ----------------------------------------------------------------------------------------


def _job(db: sqlite_utils.Database, run: int, exp: int, batch: int, status: str = "running") -> int:
    return jobs.create(
        db,
        {
            "run_id": run,
            "experiment_id": exp,
            "batch": batch,
            "pair_start": batch * 8,
            "pairs": 8,
            "nonce": "n",
            "backend": "local",
            "status": status,
            "log_path": f"batch-{batch}.log",
            "job_dir": f"jobs/batch-{batch}",
            "submitted_at": T,
        },
    )


def test_jobs(db: sqlite_utils.Database) -> None:
    run = _run(db)
    exp = _experiment(db, run)
    second, first = _job(db, run, exp, 1, "lost"), _job(db, run, exp, 0, "succeeded")
    assert [j.batch for j in jobs.of_experiment(db, exp)] == [0, 1]
    jobs.update(db, first, {"exit_code": 3})
    jobs.update(db, first, {"detail": "why"})  # only the columns given are written
    job = jobs.of_experiment(db, exp)[0]
    assert (job.id, job.exit_code, job.detail, job.status) == (first, 3, "why", "succeeded")
    assert jobs.count(db, exp, "lost") == 1
    assert [j.id for j in jobs.of_run(db, run, ["lost", "running"])] == [second]
    jobs.forget(db, second)
    assert jobs.count(db, exp, "lost") == 0
    with pytest.raises(sqlite3.IntegrityError):  # one job per batch
        _job(db, run, exp, 0)


# --- runs ----------------------------------------------------------------------------------------


def test_free_names_and_imported_runs(db: sqlite_utils.Database) -> None:
    assert run_records.free_name(db, "r") == "r"
    _run(db, "r", imported_from="/logs/a.jsonl#segment=0")
    _run(db, "r-2", imported_from="/logs/a.jsonl#segment=1")
    _run(db, "other", status="interrupted")
    assert run_records.free_name(db, "r") == "r-3"
    assert run_records.name_taken(db, "other") and not run_records.name_taken(db, "r-3")
    assert run_records.imported_names(db, "/logs/a.jsonl#") == ["r", "r-2"]
    assert run_records.imported_names(db, "/logs/b.jsonl#") == []
    assert [r.name for r in run_records.processes(db, ["finished", "interrupted"], measured_only=True)] == [
        "other"
    ]
    assert run_records.count(db) == 3


def test_a_summary_given_as_text_is_stored_as_it_is(db: sqlite_utils.Database) -> None:
    run = _run(db)
    run_records.update(db, run, {"summary": json.dumps({"z": 1, "a": 2})})
    assert run_records.row(db, run)["summary"] == '{"z": 1, "a": 2}'  # type: ignore[index]
    run_records.update(db, run, {"summary": {"z": 1, "a": 2}})
    assert run_records.row(db, run)["summary"] == '{"a": 2, "z": 1}'  # type: ignore[index]
    proc = run_records.process(db, run)
    assert proc is not None and proc.name == "r1" and run_records.process(db, run + 1) is None


# --- transactions --------------------------------------------------------------------------------


def test_store_writes_belong_to_the_callers_transaction(db: sqlite_utils.Database) -> None:
    """The loop makes several writes one transaction (a job's end and its decision): no store
    function may commit on its own."""
    run = _run(db)
    with pytest.raises(RuntimeError), transaction(db):
        exp = _experiment(db, run)
        wave = waves.create(db, {"run_id": run, "number": 1, "baseline_commit": "b", "started_at": T})
        experiments.update(db, exp, {"wave_id": wave})
        experiments.merge_meta(db, exp, {"role": "x"})
        samples.insert_new(db, _sample(exp, 0, "A", 1.0))
        _job(db, run, exp, 0)
        _decide(db, exp, 8)
        run_records.update(db, run, {"status": "running"})
        raise RuntimeError("the runner dies here")
    assert experiments.of_run(db, run) == []
    assert run_records.row(db, run)["status"] == "finished"  # type: ignore[index]
    for table in ("waves", "samples", "jobs", "decisions"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
