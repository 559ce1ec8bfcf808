"""`autoresearch init --bench-cmd ...`: scaffolded scripts, protected harness, a config that teaches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from kb.config import load_settings
from tests.conftest import make_repo
from tests.runner.onboarding_support import GOOD_REGEX, bench_cmd, check_cmd, cli, init, make_target
from tests.runner.research_support import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]


def test_scaffolded_scripts_run_the_command_and_protect_its_harness(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    ws = tmp_path / "ws"
    result = init(ws, target, "--bench-cmd", bench_cmd(), "--metric-regex", GOOD_REGEX,
                  "--check-cmd", check_cmd(), "--samples", "3", "--metric", "mbs")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    bench, checks = ws / "autoresearch.sh", ws / "autoresearch.checks.sh"
    assert os.access(bench, os.X_OK) and os.access(checks, os.X_OK)
    settings = load_settings(ws / "autoresearch.toml")
    # The harness the command names (a build output) is protected through its source.
    assert settings.target.protect == ["bench/run_bench.c"]
    assert settings.metric.primary == "mbs" and settings.validation.required
    assert settings.fleet.parallel <= max(1, (os.cpu_count() or 1) // 2)
    # A non-ggml tree gets no ggml op lists, and a note saying why and what to write instead.
    assert settings.kb.inventory.single_ops == [] and settings.kb.inventory.view_ops == []
    text = (ws / "autoresearch.toml").read_text()
    assert "No compute backends in this tree" in text and "[[kb.inventory.rules]]" in text
    assert "named by the benchmark or check command" in text

    # The scripts, run as the runner runs them (in the built tree's root), print METRIC lines
    # from the command's own output, each after the line it came from.
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", str(target), str(tree)], check=True)
    subprocess.run(["make", "-s"], cwd=tree, check=True)
    out = subprocess.run(["bash", str(bench)], cwd=tree, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    metrics = [ln for ln in lines if ln.startswith("METRIC ")]
    assert len(metrics) == 3 and all(re.fullmatch(r"METRIC mbs=[\d.]+", m) for m in metrics)
    assert lines[0].startswith("# matched: block 14 of 64: ")
    assert "result" not in out  # quiet: the command's other output is not shown
    assert subprocess.run(["bash", str(checks)], cwd=tree, capture_output=True).returncode == 0
    broken = tree / "bench" / "run_bench.c"
    broken.write_text(broken.read_text().replace("r % 1000003UL", "(r + 1) % 1000003UL"))
    subprocess.run(["make", "-s"], cwd=tree, check=True)
    failed = subprocess.run(["bash", str(checks)], cwd=tree, capture_output=True, text=True)
    assert failed.returncode != 0 and "the check command failed" in failed.stdout


def test_a_regex_that_matches_nothing_fails_the_script_naming_it(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    ws = tmp_path / "ws"
    assert init(ws, target, "--bench-cmd", bench_cmd(1000), "--metric-regex", r"([\d.]+) GB/s").exit_code == 0
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", str(target), str(tree)], check=True)
    subprocess.run(["make", "-s"], cwd=tree, check=True)
    run = subprocess.run(["bash", str(ws / "autoresearch.sh")], cwd=tree, capture_output=True, text=True)
    assert run.returncode == 3
    assert r"the regex `([\d.]+) GB/s` matched no line" in run.stderr and "MB/s" in run.stderr
    assert r"try --metric-regex '([\d.]+) MB/s'" in run.stderr


def test_metric_lines_printed_by_the_command_pass_through(tmp_path: Path) -> None:
    target = make_repo(tmp_path / "t", {"bench.sh": "echo 'METRIC speed=12.5'\necho noise\n"})
    ws = tmp_path / "ws"
    assert cli("init", str(ws), "--target", str(target), "--bench-cmd", "bash bench.sh",
               "--metric", "speed").exit_code == 0  # fmt: skip
    out = subprocess.run(["bash", str(ws / "autoresearch.sh")], cwd=target, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["METRIC", "speed=12.5"] * 5
    assert load_settings(ws / "autoresearch.toml").target.protect == ["bench.sh"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--metric-regex", r"(\d+) of (\d+)"], "needs exactly one group"),
        (["--metric-regex", "([0-9"], "not a valid regex"),
        (
            ["--metric-regex", r"(?P<mbs>[\d.]+) MB/s", "--metric", "tput"],
            "--metric tput: the regex yields mbs",
        ),
    ],
)
def test_bad_scaffold_input_is_one_line_and_leaves_nothing(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    target = make_target(tmp_path / "t")
    result = init(tmp_path / "ws", target, "--bench-cmd", bench_cmd(), *extra)
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "ws").exists()


def test_a_target_with_its_own_script_is_not_overwritten(tmp_path: Path) -> None:
    target = make_repo(tmp_path / "t", {"autoresearch.sh": "echo 'METRIC throughput=1'\n"})
    result = cli("init", str(tmp_path / "ws"), "--target", str(target), "--bench-cmd", "true")
    assert result.exit_code == 1 and "has its own autoresearch.sh" in result.stderr
    assert not (tmp_path / "ws").exists()


def test_every_key_init_writes_is_in_the_readme_configuration_section(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    assert init(tmp_path / "ws", target, "--bench-cmd", bench_cmd()).exit_code == 0
    text = (tmp_path / "ws" / "autoresearch.toml").read_text()
    assert "README.md, section Configuration" in text
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^## Configuration\n(.*?)(?=^## )", readme, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no `## Configuration` section"
    section = match.group(1)

    missing: list[str] = []
    table, rows_of = "", False
    for line in text.splitlines():
        header = re.fullmatch(r"(\[\[?)([\w.]+)\]\]?", line)
        if header:
            table, rows_of = header.group(2), header.group(1) == "[["
            if f"`{table}`" not in section and f"[{table}]" not in section:
                missing.append(table)
            continue
        key = re.match(r"^(?:# )?(\w+) = ", line)
        if key is None or (line.startswith("#") and "(unset)" not in line):
            continue
        # Keys of an array of tables ([[metric.guards]]) are documented by their own name.
        wanted = f"`{key.group(1)}`" if rows_of else f"`{table}.{key.group(1)}`"
        if wanted not in section:
            missing.append(f"{table}.{key.group(1)}")
    assert tomllib.loads(text)  # the file is valid TOML
    assert not missing, f"keys init writes that README's Configuration section does not explain: {missing}"
    # Every key has a one-line comment above it in the file.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\w+ = ", line):
            assert lines[i - 1].startswith("#"), f"no comment above {line!r}"


def _draft(regex: str = GOOD_REGEX) -> str:
    return json.dumps(
        {
            "build_cmd": "make -s",
            "bench_cmd": bench_cmd(),
            "metric_regex": regex,
            "metric": "mbs",
            "direction": "higher",
            "check_cmd": "./bench/run_bench 1000 >/dev/null",
            "notes": "the harness in bench/ prints MB/s",
        }
    )


def test_draft_scripts_from_a_model_are_shown_and_written_only_when_accepted(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    with ScriptedLLM([_draft()]) as llm:
        ws = tmp_path / "ws"
        result = cli("init", str(ws), "--target", str(target), "--draft-scripts",
                     "--model", llm.litellm_model, "--api-base", llm.base_url, "--yes")  # fmt: skip
        assert result.exit_code == 0, result.stderr
        request = llm.requests[0]
    shown = result.output
    assert "benchmark     ./bench/run_bench" in shown and "metric regex  ([\\d.]+) MB/s" in shown
    # The model saw the tree's build files and README, quoted as data.
    prompt = json.dumps(request["messages"])
    assert "Makefile" in prompt and "tinyhash" in prompt and "<<<DATA" in prompt
    settings = load_settings(ws / "autoresearch.toml")
    assert settings.target.build_cmd == "make -s" and settings.metric.primary == "mbs"
    assert settings.llm.model == llm.litellm_model
    assert "./bench/run_bench" in (ws / "autoresearch.sh").read_text()
    assert "./bench/run_bench 1000" in (ws / "autoresearch.checks.sh").read_text()
    db = subprocess.run(["sqlite3", str(ws / "autoresearch.db"), "SELECT purpose FROM llm_calls"],
                        capture_output=True, text=True).stdout.split()  # fmt: skip
    assert db == ["draft_scripts"]


def test_a_declined_draft_writes_nothing(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    with ScriptedLLM([_draft()]) as llm:
        result = cli("init", str(tmp_path / "ws"), "--target", str(target), "--draft-scripts",
                     "--model", llm.litellm_model, "--api-base", llm.base_url, input_text="n\n")  # fmt: skip
    assert result.exit_code == 1 and "the draft was declined" in result.stderr
    assert "./bench/run_bench" in result.output  # it was shown before the question
    assert not (tmp_path / "ws").exists()


def test_an_invalid_draft_is_sent_back_and_the_corrected_one_used(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t")
    with ScriptedLLM([_draft(r"(\d+) of (\d+)"), _draft()]) as llm:
        result = cli("init", str(tmp_path / "ws"), "--target", str(target), "--draft-scripts",
                     "--model", llm.litellm_model, "--api-base", llm.base_url, "--yes")  # fmt: skip
        assert result.exit_code == 0, result.stderr
        assert len(llm.requests) == 2 and "needs exactly one group" in json.dumps(llm.requests[1]["messages"])


def test_harness_paths_are_what_the_commands_name_in_the_tree() -> None:
    from runner.harness.scaffold import harness_paths

    tree = ["bench/run_bench.c", "tests/test_xxh32.py", "setup.py", "scripts/bench.sh", "src/lib.c"]
    found = harness_paths(
        [
            "./bench/run_bench 64",  # a build output: its source
            "python3 -m unittest -q tests.test_xxh32",  # a Python module
            "bash -c 'scripts/bench.sh --size=1'",  # inside a nested command
            "make -C src",  # folders are never protected (patches must reach the code)
        ],
        tree,
    )
    assert found == ["bench/run_bench.c", "tests/test_xxh32.py", "scripts/bench.sh"]
