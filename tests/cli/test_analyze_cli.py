"""`autoresearch analyze`: offline decisions from sample files and JSON-lines batches."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tui.cli import main


def pairs(seed: int, n: int, effect: float, cv: float) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    level = 0.0
    base: list[float] = []
    cand: list[float] = []
    for _ in range(n):
        level += rng.gauss(0, 0.003)
        base.append(50.0 * math.exp(level + rng.gauss(0, cv)))
        cand.append(50.0 * (1 + effect) * math.exp(level + rng.gauss(0, cv)))
    return base, cand


def write(path: Path, values: list[float], blank_lines: bool = False) -> Path:
    lines = [f"{v:.4f}" for v in values]
    if blank_lines:
        lines.insert(2, "")
        lines.append("   ")
    path.write_text("\n".join(lines) + "\n")
    return path


def invoke(*args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(main, ["analyze", *args])


@pytest.fixture
def improved(tmp_path: Path) -> tuple[Path, Path]:
    base, cand = pairs(1, 24, 0.08, 0.01)
    return write(tmp_path / "a.txt", base, blank_lines=True), write(tmp_path / "b.txt", cand)


def test_paired_files_print_verdict_effect_interval_pairs_and_p(improved: tuple[Path, Path]) -> None:
    a, b = improved
    result = invoke("--baseline", str(a), "--candidate", str(b), "--paired")
    assert result.exit_code == 0, result.output
    first, reason = result.output.splitlines()
    assert first.startswith("KEEP")
    assert re.search(r"effect \+[78]\.\d%", first) and "24 pairs" in first and " p " in first
    assert "CI [+" in first and "99.9% CI" in first  # the level of the runner's third look
    assert "minimum effect" in reason


def test_json_output_and_direction_lower(improved: tuple[Path, Path]) -> None:
    a, b = improved
    result = invoke("--baseline", str(a), "--candidate", str(b), "--paired", "--json")
    payload = json.loads(result.output)
    assert payload["verdict"] == "keep" and payload["status"] == "kept"
    assert payload["paired"] is True and payload["pairs"] == 24
    assert payload["ci_low"] < payload["effect"] < payload["ci_high"]
    lower = invoke("--baseline", str(a), "--candidate", str(b), "--paired", "--json", "--direction", "lower")
    assert json.loads(lower.output)["verdict"] == "discard"


def test_unpaired_by_default_accepts_unequal_counts(tmp_path: Path) -> None:
    base, cand = pairs(2, 30, 0.06, 0.01)
    a = write(tmp_path / "a.txt", base)
    b = write(tmp_path / "b.txt", cand[:20])
    result = invoke("--baseline", str(a), "--candidate", str(b), "--json")
    payload = json.loads(result.output)
    assert payload["verdict"] == "keep" and payload["paired"] is False
    assert payload["level"] == pytest.approx(0.95)
    assert "30 baseline and 20 candidate" in payload["reason"]
    paired = invoke("--baseline", str(a), "--candidate", str(b), "--paired")
    assert paired.exit_code == 1
    assert "has 30 values but" in paired.stderr and "has 20" in paired.stderr


def test_single_look_versus_the_runners_sequential_look(tmp_path: Path) -> None:
    base, cand = pairs(3, 16, 0.03, 0.02)
    a, b = write(tmp_path / "a.txt", base), write(tmp_path / "b.txt", cand)
    common = ["--baseline", str(a), "--candidate", str(b), "--paired", "--json"]
    assert json.loads(invoke(*common).output)["verdict"] == "continue"
    once = json.loads(invoke(*common, "--single-look").output)
    assert once["verdict"] == "keep" and once["level"] == pytest.approx(0.95)
    capped = json.loads(invoke(*common, "--max-pairs", "16", "--min-effect", "0.035").output)
    assert capped["verdict"] == "inconclusive" and "cap of 16 pairs" in capped["reason"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1.5\n2.5\nfast\n", "a.txt:3: not a number: 'fast'"),
        ("1.5\n\n-2\n", "a.txt:3: -2 is not a positive number"),
        ("1.5\nnan\n", "a.txt:2: not a number: 'nan'"),
        # Only ASCII decimal numbers count: float() would read these as 12 and 1000.
        ("1.5\n\u0661\u0662\n", "a.txt:2: not a number: '\u0661\u0662'"),
        ("1.5\n\uff11\uff12\n", "a.txt:2: not a number: '\uff11\uff12'"),
        ("1.5\n1_000\n", "a.txt:2: not a number: '1_000'"),
        ("\n\n", "a.txt: holds no numbers"),
    ],
)
def test_bad_sample_file_is_a_one_line_error_naming_file_and_line(
    tmp_path: Path, content: str, message: str
) -> None:
    a = tmp_path / "a.txt"
    a.write_text(content)
    b = write(tmp_path / "b.txt", [1.0, 2.0, 3.0])
    result = invoke("--baseline", str(a), "--candidate", str(b))
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_inputs_are_user_errors(tmp_path: Path) -> None:
    b = write(tmp_path / "b.txt", [1.0, 2.0, 3.0])
    missing = invoke("--baseline", str(tmp_path / "nope.txt"), "--candidate", str(b))
    assert missing.exit_code == 1 and "nope.txt: no such file" in missing.stderr
    alone = invoke("--baseline", str(b))
    assert alone.exit_code == 1 and "give --baseline FILE and --candidate FILE" in alone.stderr
    both = invoke("--batch", str(b), "--baseline", str(b))
    assert both.exit_code == 1 and "not both" in both.stderr
    bad_alpha = invoke("--baseline", str(b), "--candidate", str(b), "--alpha", "2")
    assert bad_alpha.exit_code == 1 and "alpha 2.0" in bad_alpha.stderr


def test_batch_prints_one_json_decision_per_line_with_fdr(tmp_path: Path) -> None:
    strong = pairs(4, 24, 0.1, 0.01)
    slower = pairs(5, 24, -0.05, 0.01)
    times = pairs(6, 24, 0.1, 0.01)
    lines = [
        json.dumps({"id": "strong", "baseline": strong[0], "candidate": strong[1]}),
        "",
        json.dumps({"id": 7, "baseline": slower[0], "candidate": slower[1], "paired": True}),
        json.dumps({"baseline": times[0], "candidate": times[1], "direction": "lower", "min_effect": 0.02}),
        json.dumps({"baseline": strong[0], "candidate": strong[1][:20], "paired": False}),
    ]
    batch = tmp_path / "cases.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    result = invoke("--batch", str(batch), "--paired")
    assert result.exit_code == 0, result.stderr
    out = [json.loads(line) for line in result.output.splitlines()]
    assert [o["line"] for o in out] == [1, 3, 4, 5]
    assert out[0]["id"] == "strong" and out[1]["id"] == 7 and "id" not in out[2]
    assert [o["verdict"] for o in out] == ["keep", "discard", "discard", "keep"]
    for o in out:
        assert o["q_value"] >= o["p_value"]
    assert out[0]["q_value"] > out[0]["p_value"]  # four cases share the false discovery budget
    assert "unpaired" in out[3]["reason"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "cases.jsonl:2: not valid JSON"),
        ("[1, 2]", "cases.jsonl:2: a case must be a JSON object"),
        ('{"baseline": [1, 2, 3]}', "cases.jsonl:2: missing 'candidate'"),
        ('{"baseline": [1, 2, "x"], "candidate": [1, 2, 3]}', "baseline value #3 is not a number"),
        ('{"baseline": [1, 2, 0], "candidate": [1, 2, 3]}', "baseline value #3 (0) is not a positive"),
        ('{"baseline": [1, 2], "candidate": [1, 2, 3]}', "paired case has 2 baseline but 3"),
        ('{"baseline": [1], "candidate": [1], "speed": 1}', "unknown key 'speed'"),
        ('{"baseline": [1], "candidate": [1], "direction": "up"}', "'direction' must be"),
        ('{"baseline": [1], "candidate": [1], "min_effect": 2}', "min_effect 2.0: must lie"),
    ],
)
def test_bad_batch_line_is_a_one_line_error_naming_the_line(tmp_path: Path, line: str, message: str) -> None:
    batch = tmp_path / "cases.jsonl"
    batch.write_text('{"baseline": [1, 2, 3], "candidate": [1, 2, 3]}\n' + line + "\n")
    result = invoke("--batch", str(batch), "--paired")
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.output == ""  # nothing half-printed


def test_installed_console_script(improved: tuple[Path, Path]) -> None:
    a, b = improved
    script = shutil.which("autoresearch", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-c", "from tui.cli import main; main()"]
    ok = subprocess.run(
        [*command, "analyze", "--baseline", str(a), "--candidate", str(b), "--paired", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "keep"
    bad = subprocess.run(
        [*command, "analyze", "--baseline", str(a), "--candidate", str(a.parent / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [f"Error: {a.parent / 'missing'}: no such file"]
