"""Importing pi-autoresearch / SkyPilot-example autoresearch.jsonl logs into the history."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sqlite_utils

from kb.db import connect, one, rows
from kb.errors import UserError
from runner.record import history
from runner.record.importer import import_jsonl
from runner.record.redecide import redecide

# The reference log of the issue (pi-autoresearch format), copied next to this test.
SAMPLE = Path(__file__).with_name("autoresearch.sample.jsonl")
SAMPLE_LINES = [
    {"type": "config", "name": "llama.cpp CPU tg", "metricName": "tg", "metricUnit": "t/s",
     "bestDirection": "higher"},
    {"run": 1, "commit": "a1b2c3d", "metric": 41.37, "metrics": {"pp": 241.24}, "status": "keep",
     "description": "baseline", "timestamp": 1764660000, "segment": 0, "confidence": None,
     "asi": {"hypothesis": "baseline measurement"}, "literature_source": None},
    {"run": 2, "commit": "b2c3d4e", "metric": 41.70, "metrics": {"pp": 242.9}, "status": "discard",
     "description": "prefetch in Q4_0 dot product inner loop", "timestamp": 1764660900, "segment": 0,
     "confidence": 0.4, "asi": {"learned": "within noise"}, "literature_source": None},
    {"run": 3, "commit": "c3d4e5f", "metric": 0, "metrics": {}, "status": "crash",
     "description": "gate+up concat of repacked weights", "timestamp": 1764661800, "segment": 0,
     "confidence": None, "asi": {"learned": "concat does not support repacked quantized tensors"},
     "literature_source": "Blockbuster (arXiv)"},
    {"run": 4, "commit": "d4e5f6a", "metric": 44.1, "metrics": {"pp": 243.0}, "status": "checks_failed",
     "description": "fused RMS_NORM+MUL without use-count check", "timestamp": 1764662700, "segment": 0,
     "confidence": 1.1, "asi": {"learned": "output of RMS_NORM used elsewhere"},
     "literature_source": "CUDA backend fusion"},
    {"type": "config", "name": "llama.cpp CPU tg, flash attention", "metricName": "tg", "metricUnit": "t/s",
     "bestDirection": "higher"},
    {"run": 5, "commit": "e5f6a7b", "metric": 47.62, "metrics": {"pp": 244.22}, "status": "keep",
     "description": "one AVX2 FMA pass for scale+mask+max over the KQ tile", "timestamp": 1764663600,
     "segment": 1, "confidence": 2.6, "asi": {"hypothesis": "fewer passes over KQ"},
     "literature_source": "CUDA/Metal flash attention kernels"},
    {"run": 6, "commit": "f6a7b8c", "metric": 48.9, "metrics": {"pp": 245.0}, "status": "keep",
     "description": "hoist the mask load", "timestamp": 1764664500, "segment": 1, "confidence": 1.9,
     "asi": None, "literature_source": "https://arxiv.org/abs/2205.14135"},
]  # fmt: skip


def write_log(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def counts(db: sqlite_utils.Database) -> dict[str, int]:
    tables = [
        "runs",
        "waves",
        "experiments",
        "samples",
        "decisions",
        "hypotheses",
        "hypothesis_sources",
        "events",
    ]
    return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


@pytest.fixture
def db(tmp_path: Path) -> sqlite_utils.Database:
    return connect(tmp_path / "autoresearch.db")


def test_the_reference_sample_imports_as_one_run_per_segment(
    db: sqlite_utils.Database, tmp_path: Path
) -> None:
    log = tmp_path / "autoresearch.jsonl"
    shutil.copy(SAMPLE, log)
    assert [json.loads(line) for line in SAMPLE.read_text().splitlines()] == SAMPLE_LINES[:7]
    runs = import_jsonl(db, log)
    assert [(r.name, r.metric, r.direction, r.experiments, r.kept) for r in runs] == [
        ("import-llama-cpp-cpu-tg-s0", "tg", "higher", 4, 1),
        ("import-llama-cpp-cpu-tg-flash-attention-s1", "tg", "higher", 1, 1),
    ]
    run = history.find_run(db, runs[0].id)
    assert run.status == "finished" and run.imported_from == f"{log.resolve()}#segment=0"
    assert run.baseline_commit == "a1b2c3d" and run.policy["metric"] == "tg" and run.policy["unit"] == "t/s"
    assert run.started_at == 1764660000 and run.ended_at == 1764662700
    exps = history.experiments(db, run.id)
    assert [(e.title, e.status, e.candidate_commit) for e in exps] == [
        ("baseline", "kept", "a1b2c3d"),
        ("prefetch in Q4_0 dot product inner loop", "discarded", "b2c3d4e"),
        ("gate+up concat of repacked weights", "crashed", "c3d4e5f"),
        ("fused RMS_NORM+MUL without use-count check", "checks_failed", "d4e5f6a"),
    ]
    baseline, prefetch, crash, checks = exps
    # The baseline line is a measurement of side A; it cites nothing.
    assert [(s.side, s.metric, s.value) for s in history.samples(db, baseline.id)] == [
        ("A", "pp", 241.24),
        ("A", "tg", 41.37),
    ]
    assert baseline.hypothesis_id is None and baseline.meta["baseline"] is True
    # A candidate: its own value as B, the value it was compared with as A; one pair.
    assert history.pairs(db, prefetch.id, "tg") == ([41.37], [41.70])
    assert prefetch.decision is not None and prefetch.decision.origin == "import"
    assert (prefetch.decision.verdict, prefetch.pairs) == ("discard", 1)
    assert prefetch.effect == pytest.approx(41.70 / 41.37 - 1)
    assert prefetch.ci == (None, None)
    assert "confidence 0.4" in (prefetch.decision.reason or "")
    # A crash measured nothing: its metric 0 is not a sample.
    assert history.samples(db, crash.id) == [] and crash.decision is None
    assert crash.meta["original_status"] == "crash"
    assert checks.decision is None and history.pairs(db, checks.id, "tg") == ([41.37], [44.1])
    # Hypotheses of origin import, literature sources kept as refs.
    hyp = one(db, "SELECT * FROM hypotheses WHERE id = ?", [checks.hypothesis_id])
    assert hyp is not None and hyp["origin"] == "import" and hyp["title"] == checks.title
    assert checks.sources == ("note:CUDA backend fusion",)
    assert crash.sources == ("note:Blockbuster (arXiv)",)
    json.dumps(history.history_json(db))  # browsable as JSON


def test_later_lines_compare_with_the_latest_keep(db: sqlite_utils.Database, tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.jsonl", SAMPLE_LINES[5:])
    (run,) = import_jsonl(db, log, name="fa")
    assert run.name == "fa" and run.kept == 2
    first, second = history.experiments(db, run.id)
    assert first.meta["baseline"] is True
    assert history.pairs(db, second.id, "tg") == ([47.62], [48.9])
    assert second.sources == ("https://arxiv.org/abs/2205.14135",)
    assert history.find_run(db, "fa").head_commit == "f6a7b8c"


def test_lower_is_better_and_millisecond_timestamps(db: sqlite_utils.Database, tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "ms.jsonl",
        [
            {"type": "config", "metricName": "latency_ms", "bestDirection": "lower"},
            {
                "run": 1,
                "metric": 20.0,
                "status": "keep",
                "description": "baseline",
                "timestamp": 1764660000000,
            },
            {"run": 2, "metric": 16.0, "status": "keep", "description": "faster", "timestamp": 1764660060000},
        ],
    )
    (run,) = import_jsonl(db, log)
    assert run.name == "import-ms" and run.direction == "lower"
    info = history.find_run(db, run.id)
    assert (info.started_at, info.ended_at) == (1764660000, 1764660060)
    faster = history.experiments(db, run.id)[1]
    assert faster.effect == pytest.approx(20.0 / 16.0 - 1)  # positive = better, whatever the direction


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"run": 9, "metric": 1.0, "status": "keep", "description": 5}', "description must be a string"),
        ('{"run": "9", "metric": 1.0, "status": "keep"}', "run '9' must be a number"),
        ('{"run": 9, "metric": 1.0, "literature_source": ["a"]}', "literature_source must be a string"),
        ('{"type": "config", "metricName": "tg", "bestDirection": "up"}', "bestDirection 'up'"),
        ('{"type": "config", "metricName": 5}', "metricName 5 must be a non-empty string"),
        ('{"type": "summary"}', "unknown line type 'summary'"),
        ('{"experiment": "x", "result": "ok"}', "neither a config line nor a run line"),
    ],
)
def test_a_malformed_line_names_its_number_and_imports_nothing(
    db: sqlite_utils.Database, tmp_path: Path, line: str, message: str
) -> None:
    log = write_log(tmp_path / "bad.jsonl", [*SAMPLE_LINES[:3], "", line, *SAMPLE_LINES[3:]])
    before = counts(db)
    with pytest.raises(UserError) as caught:
        import_jsonl(db, log)
    text = str(caught.value)
    assert text.startswith(f"{log.resolve()}:5: ") and message in text and "\n" not in text
    assert text.endswith("nothing imported (--lenient skips malformed lines)")
    assert counts(db) == before


def test_a_second_import_of_the_same_file_is_refused(db: sqlite_utils.Database, tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.jsonl", SAMPLE_LINES)
    import_jsonl(db, log)
    before = counts(db)
    with pytest.raises(UserError, match=r"already imported \(run import-llama-cpp-cpu-tg-s0, "):
        import_jsonl(db, log)
    assert counts(db) == before


def test_files_without_runs_or_unreadable_are_one_line_errors(
    db: sqlite_utils.Database, tmp_path: Path
) -> None:
    with pytest.raises(UserError, match="no such file"):
        import_jsonl(db, tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="no run lines"):
        import_jsonl(db, write_log(tmp_path / "c.jsonl", [SAMPLE_LINES[0]]))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UserError, match="not UTF-8"):
        import_jsonl(db, tmp_path / "bin.jsonl")
    assert counts(db)["runs"] == 0


def test_imported_runs_can_be_re_decided(db: sqlite_utils.Database, tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.jsonl", SAMPLE_LINES)
    first, _ = import_jsonl(db, log)
    result = redecide(db, first.name)
    # One sample per side cannot carry a verdict: keep and discard both become inconclusive.
    by_title = {i.title: (i.old_verdict, i.new.verdict, i.short) for i in result.items}
    assert by_title == {"prefetch in Q4_0 dot product inner loop": ("discard", "inconclusive", True)}
    assert {s["status"] for s in result.skipped} >= {"crashed", "checks_failed"}
    baseline_skip = [s for s in result.skipped if s["title"] == "baseline"]
    assert baseline_skip and "no complete pair" in baseline_skip[0]["why"]
    assert rows(db, "SELECT count(*) AS n FROM decisions WHERE origin = 'redecide'") == [{"n": 0}]
