"""`autoresearch validate` and the check `run` makes: on small real targets with no scripts of their own.

Each test makes a real C (or shell) target in a real git repository, scaffolds its scripts with
`init --bench-cmd`, and runs the experiment template's real jobs on the baseline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kb.config import load_settings
from kb.db import connect, one
from kb.workspace import Workspace
from runner.measure.validate import evaluate, load
from tests.conftest import make_repo
from tests.runner.onboarding_support import (
    GOOD_REGEX,
    LOOSE_REGEX,
    NAMED_REGEX,
    SPEEDUP,
    bench_cmd,
    check_cmd,
    cli,
    init,
    make_diff,
    make_target,
    set_config,
)

# Small and quick, with room for a loaded 2-core machine (15% noise seen): a 2x speedup is kept.
FAST_POLICY = {"min_effect": 0.3, "min_pairs": 6, "batch_pairs": 6, "max_pairs": 12, "self_test_pairs": 6}


def validate(ws: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("--workspace", str(ws), "validate", "--json", *args)
    return result.exit_code, json.loads(result.output)


def kinds(findings: list[dict[str, Any]]) -> list[str]:
    return [f["kind"] for f in findings]


@pytest.fixture
def scaffolded(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace on the C target with good scaffolded scripts and the fast policy."""
    target = make_target(tmp_path / "t")
    ws = tmp_path / "ws"
    result = init(ws, target, "--bench-cmd", bench_cmd(), "--metric-regex", NAMED_REGEX, "--metric", "mbs",
                  "--check-cmd", check_cmd(), "--samples", "3")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    set_config(ws, "policy", **FAST_POLICY)
    return ws, target


def test_scaffold_validate_and_a_short_run_that_decides(
    scaffolded: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, target = scaffolded
    patch = tmp_path / "speedup.patch"
    patch.write_text(make_diff(target, SPEEDUP))  # the library does one pass instead of two
    queued = cli("--workspace", str(ws), "queue", "add", str(patch), "--title", "One pass")
    assert queued.exit_code == 0, queued.stderr
    # Never validated: the run is refused, saying what to do.
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1
    assert "never validated" in refused.stderr and "autoresearch validate" in refused.stderr

    code, out = validate(ws, "--runs", "4")
    report, measurement = out["report"], out["measurement"]
    assert code == 0 and report["passed"], report["problems"]
    assert (ws / "validation.json").is_file()
    [mbs, ratio] = report["metrics"]
    assert mbs["name"] == "mbs" and mbs["primary"] and len(mbs["values"]) == 12 and len(mbs["per_call"]) == 4
    example = mbs["examples"][0]
    # The parse cross-check: the METRIC line and the command's own line it came from, number marked.
    number = example["metric_line"].removeprefix("METRIC mbs=")
    assert float(number) == example["value"]
    assert (
        example["source"].startswith("block 14 of 64: ")
        and f"[{number}] MB/s, ratio [2.500]" in example["marked"]
    )
    assert ratio["name"] == "ratio" and set(ratio["values"]) == {2.5}
    assert mbs["sample_noise"] is not None and mbs["floor"] is not None and report["call_seconds"] > 0
    steps = {s["name"]: s for s in measurement["steps"]}
    assert steps["build"]["rc"] == 0 and steps["checks"]["rc"] == 0
    # The other metric it prints is worth a guard; the advice says how.
    guard = next(f for f in report["advice"] if f["kind"] == "guard")
    assert 'metric = "ratio"' in guard["message"]

    result = cli("--workspace", str(ws), "run", "--no-final")
    assert result.exit_code == 0, result.stderr + result.output
    assert "baseline " in result.output and "target.baseline 'HEAD'" in result.output
    db = connect(ws / "autoresearch.db")
    exp = one(db, "SELECT status FROM experiments WHERE kind = 'candidate'")
    assert exp is not None and exp["status"] == "kept", result.output

    # A second run on top of the first one's winners, recorded on the run.
    first = one(db, "SELECT name, head_commit, baseline_commit FROM runs ORDER BY id LIMIT 1")
    assert first is not None and first["head_commit"] != first["baseline_commit"]
    broken = tmp_path / "broken.patch"
    broken.write_text(make_diff(target, ("src/hash.c", "    return 2;\n", "    return 2\n")))
    assert cli("--workspace", str(ws), "queue", "add", str(broken), "--title", "Typo").exit_code == 0
    again = cli(
        "--workspace", str(ws), "run", "--no-final", "--skip-self-test", "--from-winners", first["name"]
    )
    assert again.exit_code == 0, again.stderr + again.output
    assert f"the head of run {first['name']}" in again.output and "1 winner(s)" in again.output
    second = one(db, "SELECT baseline_commit, options FROM runs ORDER BY id DESC LIMIT 1")
    assert second is not None and second["baseline_commit"] == first["head_commit"]
    assert json.loads(second["options"])["from_winners"] == first["name"]


def test_validate_catches_a_regex_that_takes_the_wrong_number(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    ws = tmp_path / "ws"
    assert init(ws, target, "--bench-cmd", bench_cmd(), "--metric-regex", LOOSE_REGEX, "--samples", "1",
                "--check-cmd", "true").exit_code == 0  # fmt: skip
    code, out = validate(ws, "--runs", "2")
    report = out["report"]
    assert code == 1 and not report["passed"]
    found = [p for p in report["problems"] if p["kind"] == "ambiguous_parse"]
    # It takes numbers from two kinds of line (the result and the throughput line) ...
    assert "2 kinds of output line" in found[0]["message"] and "'result N'" in found[0]["message"]
    # ... and from the throughput line it takes 14, not the throughput: shown marked.
    [line] = [p for p in found if "marked" in p["data"]]
    assert line["data"]["marked"].startswith("block [14] of 64: ")
    assert "matches 4 places" in line["message"] and "--accept-parse" in line["message"]
    assert 14.0 in report["metrics"][0]["values"]
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1 and "takes throughput from 2 kinds of output line" in refused.stderr

    # A capture that is only part of a number is caught too.
    set_config(ws, "policy", min_effect=0.5)
    code, out = validate(ws, "--runs", "2", "--accept-parse")
    assert "ambiguous_parse" not in kinds(out["report"]["problems"])


def test_validate_catches_a_benchmark_too_noisy_for_min_effect_and_parallel_above_the_cores(
    tmp_path: Path,
) -> None:
    # A shell benchmark whose number wanders by about +-25%: 1% cannot be resolved in 16 pairs.
    bench = 'echo "speed: $((RANDOM % 100 + 150)) MB/s"\n'
    target = make_repo(tmp_path / "t", {"bench.sh": bench, "Makefile": "all:\n\t@true\n"})
    ws = tmp_path / "ws"
    assert cli("init", str(ws), "--target", str(target), "--build-cmd", "make -s",
               "--bench-cmd", "bash bench.sh", "--metric-regex", GOOD_REGEX, "--samples", "1",
               "--check-cmd", "true").exit_code == 0  # fmt: skip
    set_config(ws, "policy", min_effect=0.01, max_pairs=16, min_pairs=8, batch_pairs=8)
    code, out = validate(ws, "--runs", "6")
    report = out["report"]
    assert code == 1
    [noisy] = [p for p in report["problems"] if p["kind"] == "too_noisy_for_min_effect"]
    floor = noisy["data"]["floor"]
    assert floor > 0.01 and f"±{floor:.1%}" in noisy["message"]
    assert "raise policy.min_effect" in noisy["message"] and "raise policy.max_pairs to" in noisy["message"]
    assert noisy["data"]["pairs_needed"] > 16
    assert "short_call" in kinds(report["advice"])  # a call of a few milliseconds
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1 and "validation failed" in refused.stderr and "min_effect" in refused.stderr

    # The stored measurement is judged under the current settings: a min_effect the noise allows
    # passes without measuring again, and parallel above the cores is refused.
    ws_obj = Workspace(ws)
    measurement = load(ws_obj)
    assert measurement is not None
    set_config(ws, "policy", min_effect=min(0.9, round(floor * 1.5, 3)))
    assert evaluate(measurement, load_settings(ws / "autoresearch.toml")).passed
    cores = os.cpu_count() or 1
    set_config(ws, "fleet", parallel=cores + 1)
    over = evaluate(measurement, load_settings(ws / "autoresearch.toml"))
    [parallel] = [p for p in over.problems if p.kind == "parallel_above_cores"]
    assert f"{cores + 1} local workers on {cores} cores" in parallel.message
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1 and "local workers on" in refused.stderr
    # ...while a run asking for fewer workers may start (it gets to the empty queue).
    allowed = cli("--workspace", str(ws), "run", "--parallel", "1")
    assert "the queue is empty" in allowed.stderr


def test_run_refuses_after_a_failed_validation_and_after_the_scripts_changed(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    ws = tmp_path / "ws"
    assert init(ws, target, "--bench-cmd", bench_cmd(1000), "--metric-regex", r"([\d.]+) GB/s",
                "--check-cmd", "true").exit_code == 0  # fmt: skip
    code, out = validate(ws, "--runs", "2")
    assert code == 1
    [failed] = [p for p in out["report"]["problems"] if p["kind"] == "benchmark_failed"]
    assert "matched no line" in failed["message"] and "GB/s" in failed["message"]
    patch = tmp_path / "p.patch"
    # A patch that does not build: the run that starts anyway ends quickly.
    patch.write_text(make_diff(target, ("src/hash.c", "    return 2;\n", "    return 2\n")))
    assert cli("--workspace", str(ws), "queue", "add", str(patch), "--title", "Typo").exit_code == 0
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1 and "validation failed: benchmark call" in refused.stderr

    # Fixing the script is a change of the scripts: validate again before a run.
    script = ws / "autoresearch.sh"
    script.write_text(script.read_text().replace("GB/s", "MB/s"))
    stale = cli("--workspace", str(ws), "run")
    assert stale.exit_code == 1 and "the benchmark script changed since the last" in stale.stderr
    # --skip-validate starts anyway, with a warning.
    skipped = cli("--workspace", str(ws), "run", "--skip-validate", "--skip-self-test", "--no-final")
    assert "warning: --skip-validate" in skipped.stderr and "changed since" in skipped.stderr
    assert skipped.exit_code == 0, skipped.stderr + skipped.output
    assert "1 crashed" in skipped.output


def test_a_failing_build_is_reported_with_its_output(tmp_path: Path) -> None:
    target = make_repo(tmp_path / "t", {"Makefile": "all:\n\t@echo 'compiler says no' && false\n"})
    ws = tmp_path / "ws"
    assert cli("init", str(ws), "--target", str(target), "--build-cmd", "make", "--bench-cmd", "true",
               "--check-cmd", "true").exit_code == 0  # fmt: skip
    code, out = validate(ws, "--runs", "2")
    assert code == 1
    [build] = out["report"]["problems"]
    assert build["kind"] == "build_failed" and "compiler says no" in build["message"]
    assert out["measurement"]["calls"] == []
    assert not (ws / "worktrees" / "validate").exists()  # cleaned up; the logs stay
    assert Path(out["measurement"]["log_dir"], "build-and-checks.log").is_file()


def test_parse_doubts_on_real_output_lines() -> None:
    from runner.measure.validate import parse_doubts

    # python-xxhash's benchmark line: a loose regex takes the 32 of "xxh32", a label.
    doubts, marked = parse_doubts(r"([\d.]+)", "gbs", "xxh32 8x64MB: 0.076 s, 6.55 GB/s")
    assert marked == "xxh[32] 8x64MB: 0.076 s, 6.55 GB/s"
    assert any("matches 5 places" in d for d in doubts) and any(
        "part of the word 'xxh32'" in d for d in doubts
    )
    # A capture that is a fragment of a number.
    doubts, _ = parse_doubts(r"(\d)\.\d+ GB/s", "gbs", "done: 16.55 GB/s")
    assert any("part of the number '16.55'" in d for d in doubts)
    # The tight regex: one place, the whole number.
    assert parse_doubts(r"([\d.]+) GB/s", "gbs", "xxh32 8x64MB: 0.076 s, 6.55 GB/s") == (
        [],
        "xxh32 8x64MB: 0.076 s, [6.55] GB/s",
    )
