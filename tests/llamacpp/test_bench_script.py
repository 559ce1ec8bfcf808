"""The reference llama.cpp benchmark script, on recorded llama-bench JSON (fa on and off, one and
two rows, rows in any order, a missing field, rows of other lengths)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from runner.harness.protocol import Metric, parse_metric_line

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "llama_bench"


def bench(fixture: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "autoresearch.sh")],
        env={**os.environ, "AR_BENCH_JSON": str(FIXTURES / fixture), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def metric_values(stdout: str, name: str) -> list[float]:
    return [
        float(line.split("=", 1)[1]) for line in stdout.splitlines() if line.startswith(f"METRIC {name}=")
    ]


@pytest.mark.parametrize(
    ("fixture", "fa", "tg_first"),
    [
        ("fa0_pp512_tg128.json", "0", 52.1),
        ("fa1_pp512_tg128.json", "1", 55.3),
        ("fa0_tg_first.json", "0", 52.1),
    ],
)
def test_one_metric_line_per_repetition(fixture: str, fa: str, tg_first: float) -> None:
    result = bench(fixture, AR_FA=fa)
    assert result.returncode == 0, result.stderr
    assert len(metric_values(result.stdout, "pp")) == 5
    tg = metric_values(result.stdout, "tg")
    assert len(tg) == 5 and tg[0] == pytest.approx(tg_first)
    # Rows are chosen by (n_prompt, n_gen): pp is never read from the tg row, whatever the order.
    assert min(metric_values(result.stdout, "pp")) > 200


def test_lines_follow_the_runner_protocol() -> None:
    result = bench("fa0_pp512_tg128.json")
    parsed = [parse_metric_line(line) for line in result.stdout.splitlines()]
    assert all(isinstance(p, Metric) for p in parsed), parsed
    names = [p.name for p in parsed if isinstance(p, Metric)]
    assert names.count("pp") == 5 and names.count("tg") == 5


def test_single_row_when_pp_is_disabled() -> None:
    result = bench("fa0_tg128_only.json", AR_PROMPT="0")
    assert result.returncode == 0, result.stderr
    assert metric_values(result.stdout, "pp") == []
    assert len(metric_values(result.stdout, "tg")) == 5


@pytest.mark.parametrize(
    ("fixture", "env", "message"),
    [
        ("fa0_tg128_only.json", {}, "no result row for ['pp']"),
        ("fa0_missing_samples_ts.json", {}, "lacks the field 'samples_ts'"),
        ("fa0_pp128_tg32.json", {}, "unexpected result row n_prompt=128"),
        ("fa1_pp512_tg128.json", {"AR_FA": "0"}, "flash_attn=1, expected 0"),
        ("fa0_pp512_tg128.json", {"AR_FA": "yes"}, "AR_FA must be 0 or 1"),
    ],
)
def test_fails_loudly_instead_of_misreporting(fixture: str, env: dict[str, str], message: str) -> None:
    result = bench(fixture, **env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "METRIC" not in result.stdout


# Real llama-bench output (this tree's build, Gemma 3 270M Q4_K_M, -p 128 -n 32 -r 3 -t 2, -o json),
# recorded on the shared 2-core machine: the spread of the samples is real contention.
@pytest.mark.parametrize(
    ("fixture", "fa"),
    [
        ("real_fa0_pp128_tg32.json", "0"),
        ("real_fa1_pp128_tg32.json", "1"),
    ],
)
def test_real_recordings_give_every_sample_of_the_right_row(fixture: str, fa: str) -> None:
    rows = json.loads((FIXTURES / fixture).read_text())
    by_key = {(row["n_prompt"], row["n_gen"]): row for row in rows}
    assert all(row["flash_attn"] == int(fa) for row in rows)
    result = bench(fixture, AR_PROMPT="128", AR_GEN="32", AR_FA=fa)
    assert result.returncode == 0, result.stderr
    assert metric_values(result.stdout, "pp") == pytest.approx(by_key[(128, 0)]["samples_ts"], abs=1e-4)
    assert metric_values(result.stdout, "tg") == pytest.approx(by_key[(0, 32)]["samples_ts"], abs=1e-4)
    # and with the published defaults (-p 512 -n 128) the same recording is refused, not misread
    assert bench(fixture, AR_FA=fa).returncode != 0


def test_real_recording_with_the_other_fa_setting_is_refused() -> None:
    result = bench("real_fa1_pp128_tg32.json", AR_PROMPT="128", AR_GEN="32", AR_FA="0")
    assert result.returncode != 0
    assert "flash_attn=1, expected 0" in result.stderr


def test_auto_flash_attention_is_not_taken_for_on(tmp_path: Path) -> None:
    # llama-bench writes flash_attn as an int: -1 (auto) must not pass for 1
    rows = json.loads((FIXTURES / "real_fa1_pp128_tg32.json").read_text())
    for row in rows:
        row["flash_attn"] = -1
    auto = tmp_path / "auto.json"
    auto.write_text(json.dumps(rows))
    result = bench(str(auto), AR_PROMPT="128", AR_GEN="32", AR_FA="1")
    assert result.returncode != 0
    assert "flash_attn=-1, expected 1" in result.stderr
    assert "METRIC" not in result.stdout
