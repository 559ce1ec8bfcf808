"""`autoresearch queue` and `autoresearch run` from the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.db import one, rows
from kb.workspace import Workspace
from tests.runner.runner_target import make_diff, make_workspace, must

FAST = {"min_pairs": 6, "batch_pairs": 1, "max_pairs": 6, "self_test_pairs": 6}


def invoke(ws: Workspace, *args: str, mix_stderr: bool = True) -> Result:
    from tui.cli import main

    runner = CliRunner(mix_stderr=mix_stderr)
    return runner.invoke(main, ["--workspace", str(ws.root), *args], catch_exceptions=False)


def counts(ws: Workspace) -> list[int]:
    db = ws.db()
    return [
        must(one(db, f"SELECT count(*) AS n FROM {t}"))["n"] for t in ("hypotheses", "patches", "sources")
    ]


@pytest.fixture
def ws_target(tmp_path: Path) -> tuple[Workspace, Path]:
    return make_workspace(tmp_path, policy=FAST)


def test_queue_add_and_list(ws_target: tuple[Workspace, Path], tmp_path: Path) -> None:
    ws, target = ws_target
    patch = tmp_path / "speedup.patch"
    patch.write_text(make_diff(target, "speedup"))
    result = invoke(
        ws,
        "queue",
        "add",
        str(patch),
        "--title",
        "Skip the warm-up",
        "--source",
        "https://example.org/paper",
        "--source",
        "note:ik_llama.cpp@abc1234 does it",
        "--source",
        "note:seen in a  profile",
        "--json",
    )
    assert result.exit_code == 0, result.output
    added = json.loads(result.output)
    assert added["files"] == ["prog.c"]
    assert added["sources"] == [
        "https://example.org/paper",
        "note:ik_llama.cpp@abc1234 does it",
        "note:seen in a profile",
    ]
    listed = json.loads(invoke(ws, "queue", "list", "--json").output)
    assert [(i["hypothesis"], i["status"], i["runnable"], i["outcome"]) for i in listed] == [
        (added["hypothesis"], "patched", True, None)
    ]
    assert listed[0]["sources"] == added["sources"]
    table = invoke(ws, "queue", "list").output
    assert "Skip the warm-up" in table and "patched" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.patch", "--title", "t"], "no such file"),
        (["not-a-diff.patch", "--title", "t"], "not a unified diff"),
        (["good.patch", "--title", "t", "--source", "ftp://x"], "must be URL, fork:NAME@SHA"),
        (["good.patch", "--title", "t", "--source", "gap:99"], "gap:99: no such evidence"),
        (["good.patch", "--title", "  "], "must not be empty"),
    ],
)
def test_queue_add_errors_change_nothing(
    ws_target: tuple[Workspace, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    ws, target = ws_target
    (tmp_path / "not-a-diff.patch").write_text("just words\n")
    (tmp_path / "good.patch").write_text(make_diff(target, "noop"))
    args = [str(tmp_path / args[0]), *args[1:]]
    before = counts(ws)
    result = invoke(ws, "queue", "add", *args)
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert counts(ws) == before


def test_run_json_and_resume_errors(ws_target: tuple[Workspace, Path], tmp_path: Path) -> None:
    ws, target = ws_target
    patch = tmp_path / "slow.patch"
    patch.write_text(make_diff(target, "slowdown"))
    assert invoke(ws, "queue", "add", str(patch), "--title", "Slower").exit_code == 0
    result = invoke(ws, "run", "--parallel", "1", "--json", mix_stderr=False)
    assert result.exit_code == 0, result.output + result.stderr
    summary = json.loads(result.stdout)  # progress lines went to stderr
    assert summary["status"] == "finished" and summary["self_test"]["passed"]
    (exp,) = [e for e in summary["experiments"] if e["kind"] == "candidate"]
    assert exp["status"] == "discarded" and exp["pairs"] == 6 and exp["effect"] < 0
    assert "self-test: no difference" in result.stderr
    again = invoke(ws, "run", "--resume")
    assert again.exit_code == 1 and "no interrupted run to resume" in again.output
    both = invoke(ws, "run", "--resume", "--parallel", "2")
    assert both.exit_code == 1 and "--parallel: --resume continues with the run's own options" in both.output
    assert invoke(ws, "run", "--run", "1").exit_code == 1
    bad = invoke(ws, "run", "--parallel", "0")
    assert bad.exit_code == 2 and "--parallel" in bad.output
    runs = must(one(ws.db(), "SELECT count(*) AS n FROM runs"))["n"]
    empty = invoke(ws, "run")
    assert empty.exit_code == 1 and "the queue is empty, nothing to run" in empty.output
    assert must(one(ws.db(), "SELECT count(*) AS n FROM runs"))["n"] == runs  # nothing written


@pytest.mark.slow
def test_run_detach_outlives_the_command(ws_target: tuple[Workspace, Path], tmp_path: Path) -> None:
    ws, target = ws_target
    patch = tmp_path / "slow.patch"
    patch.write_text(make_diff(target, "slowdown"))
    assert invoke(ws, "queue", "add", str(patch), "--title", "Slower").exit_code == 0
    result = invoke(ws, "run", "--detach", "--skip-self-test", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["run"] is not None and Path(info["log"]).parent == ws.logs_dir
    db = ws.db()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = one(db, "SELECT * FROM runs WHERE id = ?", [info["run"]])
        if run and run["status"] == "finished":
            break
        time.sleep(0.2)
    assert run is not None and run["status"] == "finished", Path(info["log"]).read_text()
    assert run["pid"] == info["pid"]
    assert json.loads(run["options"])["self_test"] is False
    assert "finished" in Path(info["log"]).read_text()
    assert (
        rows(db, "SELECT status FROM experiments WHERE run_id = ?", [info["run"]])[0]["status"] == "discarded"
    )
