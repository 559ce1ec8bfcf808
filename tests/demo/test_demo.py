"""`autoresearch demo`, end to end: the command as a user runs it, then the same loop on a fork whose
commit messages were shuffled between the patches.

Every assertion about an experiment finds the experiment by its code (the added and removed lines
of its patch, compared with the fork's commits), never by its title: decisions must follow the code.
What each commit's code should lead to is `FORK_PATCHES` in examples/demo/build_repos.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb import gitrepo
from kb.db import connect, one, rows
from kb.errors import UserError
from kb.search import search
from runner.demo import FORK_NAME, DemoOptions, load_build_repos, prepare_folder, run_demo, summary_lines
from runner.record.winners import provenance
from tests.packaging.wheel_support import InstalledDemo

REPO_ROOT = Path(__file__).resolve().parents[2]
BUDGET_SECONDS = 300  # the contract: the whole demo in under 5 minutes on 2 cores
build_repos = load_build_repos()
PATCHES = build_repos.FORK_PATCHES
ROLES = {p.file: i for i, p in enumerate(PATCHES)}

# The first test here may build the wheel and run the demo (the session fixture installed_demo).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    base = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
    ).stdout


def _code(diff: str) -> tuple[str, ...]:
    """What a diff changes: its added and removed lines, without file headers or context."""
    return tuple(
        line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))
    )


def _fork_code(fork: Path) -> list[tuple[str, ...]]:
    """The code of each fork commit, oldest first (the order of FORK_PATCHES)."""
    shas = _git(fork, "rev-list", "--reverse", "HEAD", f"^HEAD~{len(PATCHES)}").split()
    assert len(shas) == len(PATCHES)
    return [_code(_git(fork, "show", "--format=", sha)) for sha in shas]


def _role_of(diff: str, fork_code: list[tuple[str, ...]]) -> int:
    matches = [i for i, code in enumerate(fork_code) if code == _code(diff)]
    assert len(matches) == 1, "each experiment's patch is exactly one fork commit's code"
    return matches[0]


def _decisions(db: Any, fork: Path) -> dict[int, dict[str, Any]]:
    """Role (index into FORK_PATCHES) -> its candidate experiment, found by the patch's code."""
    fork_code = _fork_code(fork)
    found: dict[int, dict[str, Any]] = {}
    for exp in rows(
        db,
        "SELECT e.*, p.diff, p.author FROM experiments e JOIN patches p ON p.id = e.patch_id "
        "WHERE e.kind = 'candidate' AND e.status != 'lost' ORDER BY e.id",
    ):
        role = _role_of(exp["diff"], fork_code)
        assert role not in found, f"{PATCHES[role].file} was measured twice"
        found[role] = exp
    return found


def _assert_expected(decisions: dict[int, dict[str, Any]]) -> None:
    got = {PATCHES[role].file: exp["status"] for role, exp in decisions.items()}
    for patch in PATCHES:
        assert patch.file in got, f"{patch.file} ({patch.kind}) never reached an experiment"
        assert got[patch.file] in patch.expected, (
            f"{patch.file} ({patch.kind}): {got[patch.file]}, expected {' or '.join(patch.expected)}; "
            f"all: {got}"
        )


# --- the command, as the README runs it ----------------------------------------------------------


@pytest.fixture(scope="module")
def demo_cli(installed_demo: InstalledDemo) -> Iterator[dict[str, Any]]:
    """`autoresearch demo` as a user runs it: by the installed wheel, from an empty folder, once per
    session (tests/conftest.py; tests/packaging checks the install itself)."""
    directory = installed_demo.directory
    db = connect(directory / "autoresearch.db")
    yield {
        "dir": directory,
        "proc": installed_demo.proc,
        "seconds": installed_demo.seconds,
        "cpu_seconds": installed_demo.cpu_seconds,
        "load": installed_demo.load,
        "db": db,
        "fork": directory / "repos" / "fork",
    }
    db.conn.close()


def test_demo_prints_progress_and_summary(demo_cli: dict[str, Any]) -> None:
    proc, directory = demo_cli["proc"], demo_cli["dir"]
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for n in range(1, 7):
        assert f"==> {n}/6 " in out
    # Experiments are reported as they go, before the summary.
    progress, summary = out.split("\nDemo done in ", 1)
    assert re.search(r"exp \d+ .*: batch 0, pairs 0\.\.\d+ on local-\d", progress)
    assert re.search(r"exp \d+ .*: kept \+\d", progress)
    assert "self-test: no difference" in progress
    # The loop as it ran: research phase 1 before the self-test and wave 1, phase 2 after wave 1's
    # post-mortem, then the stop.
    order = [
        progress.index(line)
        for line in (
            "research phase 1: 7 mined",
            "self-test: no difference",
            "wave 1: ",
            "wave 1 reflection stored",
            "research phase 2: nothing new",
            "final: the 2 winners stacked",
        )
    ]
    assert order == sorted(order), order
    # The summary: what was kept with effect, interval and source; what was not; report; TUI.
    assert "run demo finished" in summary
    research = summary.split("Research phases (the autopilot, miners only, no model):\n", 1)[1]
    research = research.split("\n\n", 1)[0].splitlines()
    assert research[0] == "  phase 1, before wave 1: 7 mined"
    assert sum(line.startswith("      fork commit  Port ") for line in research) == len(PATCHES)
    assert sum(line.startswith("      backend gap  ") for line in research) == 1
    assert "  phase 2, after wave 1's post-mortem: nothing new" in research
    assert "Stopped: no_hypotheses (the research phase found nothing new to try)" in research
    kept_block = summary.split("Kept (", 1)[1].split("Not kept:", 1)[0]
    assert (
        len(re.findall(r"^  \+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] after \d+ pairs ", kept_block, re.M)) == 2
    )
    assert kept_block.count(f"source: fork:{FORK_NAME}@") == 2
    not_kept = summary.split("Not kept:", 1)[1]
    for status in ("discarded", "checks_failed", "refused"):
        assert re.search(rf"^  {status}\s", not_kept, re.M), status
    assert "touches autoresearch.sh" in not_kept
    assert f"Report: {directory}/reports/demo.md" in summary
    assert f"autoresearch --workspace {directory} tui" in summary


def test_demo_runs_within_its_time_budget(demo_cli: dict[str, Any]) -> None:
    # The budget is for a 2-core machine running the demo alone. Judged on the CPU time of the
    # demo's processes, which other work on the machine does not inflate: within the budget even
    # on one core (on two, the wall clock is below it with room to spare).
    seconds, cpu, load = demo_cli["seconds"], demo_cli["cpu_seconds"], demo_cli["load"]
    assert 0 < cpu < BUDGET_SECONDS, (
        f"the demo used {cpu:.0f} s of CPU ({seconds:.0f} s wall, load {load:.1f})"
    )


def test_the_demo_config_reaches_the_benchmark(demo_cli: dict[str, Any]) -> None:
    # target.env sets BENCH_REPS=3: every invocation prints three throughput samples.
    counts = rows(
        demo_cli["db"],
        "SELECT count(*) AS n FROM samples WHERE metric = 'throughput' GROUP BY experiment_id, pair, side",
    )
    assert counts and {c["n"] for c in counts} == {3}


def test_demo_decisions_follow_the_code(demo_cli: dict[str, Any]) -> None:
    _assert_expected(_decisions(demo_cli["db"], demo_cli["fork"]))


def test_redecide_replays_every_look_the_demo_recorded(demo_cli: dict[str, Any]) -> None:
    """The loop and `redecide` are one judge: every look the demo's run recorded, judged again from
    the stored samples with its policy and its wave (`redecide --check`), comes out the same."""
    from runner.record.redecide import check

    result = check(demo_cli["db"], "demo")
    assert result.replays and not result.mismatches, [r.to_json() for r in result.mismatches]
    assert result.unchecked == 0 and not result.unverifiable
    verdicts = {r.replayed.verdict for r in result.replays if r.replayed is not None}
    assert {"keep", "discard"} <= verdicts  # it replays the winners and the losers alike


def test_winners_trace_back_to_their_fork_commits(demo_cli: dict[str, Any]) -> None:
    db, directory, fork = demo_cli["db"], demo_cli["dir"], demo_cli["fork"]
    decisions = _decisions(db, fork)
    fork_shas = _git(fork, "rev-list", "--reverse", "HEAD", f"^HEAD~{len(PATCHES)}").split()
    mirror = gitrepo.open_repo(directory / "mirror.git")
    head = gitrepo.branch_head(mirror, "autoresearch/demo")
    winners = rows(db, "SELECT * FROM winners ORDER BY position")
    assert {w["experiment_id"] for w in winners} == {
        exp["id"] for exp in decisions.values() if exp["status"] == "kept"
    }
    for winner in winners:
        role = next(r for r, e in decisions.items() if e["id"] == winner["experiment_id"])
        sha = fork_shas[role]
        assert head is not None and gitrepo.is_ancestor(mirror, winner["commit_sha"], head)
        patch_file = directory / winner["patch_file"]  # stored relative to the workspace
        assert patch_file.parent == directory / "patches" and patch_file.is_file()
        assert f"Autoresearch-Source: fork:{FORK_NAME}@{sha}" in patch_file.read_text()
        chain = provenance(db, winner["experiment_id"])
        assert chain["winner"]["commit"] == winner["commit_sha"]
        assert chain["patch"]["author_kind"] == "fork_commit" and chain["patch"]["author"] == sha
        commits = [e for e in chain["evidence"] if e["kind"] == "commit"]
        assert commits, chain["evidence"]
        assert f"fork:{FORK_NAME}@{sha}" in chain["sources"]
    # Stacked, the two winners beat each one alone; each one adds to the other (ablation).
    run = one(db, "SELECT * FROM runs WHERE name = 'demo'")
    assert run is not None and run["status"] == "finished"
    final = json.loads(run["summary"])
    assert final["stack"]["status"] == "kept"
    singles = [
        e["effect"]
        for e in rows(
            db,
            "SELECT d.effect FROM decisions d JOIN experiments x ON "
            "x.id = d.experiment_id WHERE x.status = 'kept' AND "
            "x.kind = 'candidate' AND d.is_final = 1",
        )
    ]
    assert final["stack"]["effect"] > max(singles)
    assert len(final["ablation"]) == 2 and all(a["status"] == "kept" for a in final["ablation"])


def test_the_knowledge_base_behind_the_run(demo_cli: dict[str, Any]) -> None:
    db = demo_cli["db"]
    papers = rows(db, "SELECT title, language FROM sources WHERE kind = 'paper' ORDER BY id")
    assert len(papers) == 4 and any(p["language"] == "ru" for p in papers)
    assert search(db, "fused RMS norm", kind="paper", limit=3)
    fork = one(db, "SELECT * FROM sources WHERE kind = 'fork'")
    assert fork is not None and fork["name"] == FORK_NAME
    assert one(db, "SELECT count(*) AS n FROM commits")["n"] == len(PATCHES)  # type: ignore[index]
    gap = one(db, "SELECT * FROM evidence WHERE kind = 'gap'")
    assert gap is not None and "RMS_NORM" in gap["title"] and "MUL" in gap["title"]
    # The gap became a hypothesis citing it; without a model nobody wrote its patch, so it waits.
    hyp = one(db, "SELECT * FROM hypotheses WHERE origin = 'miner:gap'")
    assert hyp is not None
    cited = {
        r["evidence_id"]
        for r in rows(db, "SELECT * FROM hypothesis_evidence WHERE hypothesis_id = ?", [hyp["id"]])
    }
    assert gap["id"] in cited
    assert one(db, "SELECT id FROM patches WHERE hypothesis_id = ?", [hyp["id"]]) is None
    # Each wave's post-mortem is a note the next research phase reads.
    waves = rows(db, "SELECT * FROM waves")
    assert waves and all(w["reflection_evidence_id"] for w in waves)
    # The report and its plot are written.
    report = demo_cli["dir"] / "reports" / "demo.md"
    assert report.is_file() and "demo" in report.read_text()
    assert (demo_cli["dir"] / "reports" / "demo.html").is_file()


def test_the_autopilot_ran_two_research_phases_and_stopped_with_no_hypotheses(
    demo_cli: dict[str, Any],
) -> None:
    db = demo_cli["db"]
    run = one(db, "SELECT * FROM runs WHERE name = 'demo'")
    assert run is not None
    assert run["stop_reason"] == "no_hypotheses"
    assert json.loads(run["options"])["autopilot"] is True
    events = rows(
        db,
        "SELECT id, kind, data FROM events WHERE run_id = ? AND kind IN "
        "('research_started', 'research_done', 'wave_started') ORDER BY id",
        [run["id"]],
    )
    assert [e["kind"] for e in events] == [
        "research_started",
        "research_done",
        "wave_started",
        "research_started",
        "research_done",
    ]
    first, second = (json.loads(e["data"]) for e in events if e["kind"] == "research_done")
    # Phase 1 filled the empty queue: every fork commit (the benchmark edit too) and the gap.
    assert first["phase"] == 1 and first["mined"] == len(PATCHES) + 1
    assert first["failures"] == [] and first["call_ids"] == [] and first["cost_usd"] == 0
    assert not any(first[k] for k in ("generated", "patched", "repaired", "ported"))
    # Phase 2, after wave 1's post-mortem, found nothing new: the run stopped there.
    assert second["phase"] == 2 and second["mined"] == 0 and second["failures"] == []
    assert not any(second[k] for k in ("generated", "patched", "repaired", "ported", "repeats"))
    wave = one(db, "SELECT * FROM waves WHERE run_id = ?", [run["id"]])
    assert wave is not None and wave["number"] == 1 and wave["reflection_evidence_id"]
    assert one(db, "SELECT count(*) AS n FROM waves")["n"] == 1  # type: ignore[index]
    # Every hypothesis came from phase 1's miners, none from before the run.
    mined = rows(db, "SELECT id, data FROM events WHERE kind = 'hypotheses.mine' ORDER BY id")
    assert mined and all(m["id"] > events[0]["id"] for m in mined)


# --- decisions follow the code, not the names ----------------------------------------------------


def _split_message(text: str) -> tuple[str, str, str]:
    """A format-patch file as (headers before Subject, message from Subject to '---', the rest)."""
    start = text.index("Subject: ")
    end = text.index("\n---\n", start)
    return text[:start], text[start:end], text[end:]


def _shuffled_fork(upstream: Path, dest: Path, shift: int) -> Path:
    """A fork with the same commits, each carrying another commit's subject and message."""
    sources = [build_repos.FORK_DIR / p.file for p in PATCHES]
    parts = [_split_message(p.read_text(encoding="utf-8")) for p in sources]
    folder = dest.parent / "shuffled-patches"
    folder.mkdir()
    files = []
    for i, (head, _, rest) in enumerate(parts):
        message = parts[(i + shift) % len(parts)][1]
        path = folder / f"{i:04d}.patch"
        path.write_text(head + message + rest, encoding="utf-8")
        files.append(str(path))
    ident = {"GIT_COMMITTER_NAME": "Demo Fork", "GIT_COMMITTER_EMAIL": "fork@demo.invalid"}
    subprocess.run(
        ["git", "clone", "-q", str(upstream), str(dest)],
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull},
    )
    _git(dest, "am", "-q", *files, env=ident)
    return dest


def test_shuffled_titles_get_the_same_decisions(tmp_path: Path) -> None:
    upstream = build_repos.build_upstream(tmp_path / "repos" / "upstream")
    fork = _shuffled_fork(upstream, tmp_path / "repos" / "fork", shift=1)
    subjects = _git(fork, "log", "--reverse", "--format=%s", "HEAD", f"^HEAD~{len(PATCHES)}").splitlines()
    assert subjects == [p.subject for p in PATCHES[1:] + PATCHES[:1]]  # every title moved
    lines: list[str] = []
    result = run_demo(
        DemoOptions(
            tmp_path / "ws",
            repos=(upstream, fork),
            self_test=False,
            final=False,
            policy={"min_pairs": 10, "batch_pairs": 6, "max_pairs": 16},
        ),
        progress=lambda _stage, line: lines.append(line),
    )
    assert result.run_status == "finished", result.error
    db = connect(tmp_path / "ws" / "autoresearch.db")
    decisions = _decisions(db, fork)
    _assert_expected(decisions)
    # The titles the runner saw were the shuffled ones: the code, not the name, was judged.
    fusion = decisions[ROLES["0001-cpu-fuse-rms-norm-mul.patch"]]
    assert PATCHES[1].subject in fusion["title"] and fusion["status"] == "kept"
    cheat = decisions[ROLES["0006-bench-best-of-five.patch"]]
    assert PATCHES[0].subject in cheat["title"] and cheat["status"] == "refused"
    text = "\n".join(summary_lines(result))
    assert "Kept (" in text and "refused" in text
    # The --json output carries the research phases and the stop reason with its meaning.
    data = json.loads(json.dumps(result.to_json()))
    assert [(r["phase"], r["mined"], r["after_waves"]) for r in data["research"]] == [
        (1, len(PATCHES) + 1, 0),
        (2, 0, 1),
    ]
    assert len(data["research"][0]["found"]) == len(PATCHES) + 1
    assert data["stop_reason"] == "no_hypotheses"
    assert data["stop_meaning"] == "the research phase found nothing new to try"
    assert data["run_status"] == "finished" and Path(data["workspace"]) == (tmp_path / "ws").resolve()
    kept = sorted(e["id"] for e in decisions.values() if e["status"] == "kept")
    assert sorted(k["experiment_id"] for k in data["kept"]) == kept and len(kept) == 2
    db.conn.close()


# --- the folder ----------------------------------------------------------------------------------


def test_refuses_a_non_empty_folder_and_replaces_only_an_earlier_demo(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "demo", str(busy)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert f"{busy}: not empty; pass --force" in proc.stderr
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    # --force next to unrelated files: they stay (only the demo's own entries would be replaced).
    prepare_folder(busy, force=True)
    assert (busy / "notes.txt").read_text() == "mine\n"
    # --force on a folder holding another workspace: refused, nothing removed.
    (busy / "autoresearch.toml").write_text('[target]\npath = "/somewhere/else"\n')
    (busy / "patches").mkdir()
    with pytest.raises(UserError, match="not an earlier demo"):
        prepare_folder(busy, force=True)
    assert (busy / "patches").is_dir()
    # An earlier demo: its entries go, the rest stays.
    (busy / "autoresearch.toml").write_text(f'[target]\npath = "{busy / "repos" / "upstream"}"\n')
    (busy / "repos" / "upstream").mkdir(parents=True)
    prepare_folder(busy, force=True)
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    shutil.rmtree(busy)


# --- with a model --------------------------------------------------------------------------------


def _comment_diff(path: str, note: str) -> str:
    """A diff adding one comment line at the top of a target file (applies to the baseline)."""
    import difflib

    old = (build_repos.TARGET_DIR / path).read_text(encoding="utf-8").splitlines(keepends=True)
    new = [f"/* {note} */\n", *old]
    return "".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"))


def test_with_a_model_phase_2_repairs_generates_and_patches_and_a_repeat_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.runner.research_support import ScriptedLLM

    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")  # litellm's openai provider wants one

    def reply(body: dict[str, Any]) -> str:
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "post-mortem" in system:
            return json.dumps(
                {"worked": [], "noise": ["both comment patches"], "next": ["fuse"], "summary": "Nothing won."}
            )
        if "writing one patch" in system:
            note = "gap" if "RMS_NORM+MUL" in user else "model"
            return json.dumps(
                {"summary": "a comment", "diff": _comment_diff("src/backend-cpu/ops-softmax.c", note)}
            )
        if "search queries" in user:
            return json.dumps({"queries": ["fusing RMS norm", "memory-bound kernels"]})
        passages = re.findall(r'evidence id=(\d+) kind="passage"', user)
        assert passages, "the research prompt quotes the articles"
        hypothesis = {
            "title": "Explain the softmax passes in a comment",
            "rationale": "A scripted hypothesis that cites an article passage from the prompt.",
            "expected_effect": 0.01,
            "risk": "none",
            "confidence": 0.2,
            "evidence_ids": [int(passages[0])],
        }
        return json.dumps({"hypotheses": [hypothesis]})

    with ScriptedLLM(reply) as llm:
        result = run_demo(
            DemoOptions(
                tmp_path / "ws",
                model=llm.litellm_model,
                api_base=llm.base_url,
                self_test=False,
                final=False,
                policy={"min_pairs": 4, "batch_pairs": 4, "max_pairs": 4},
            )
        )
    assert result.run_status == "finished", result.error
    assert result.stop_reason == "no_hypotheses"
    json.dumps(result.to_json())  # the CLI's --json output
    db = connect(tmp_path / "ws" / "autoresearch.db")
    run = one(db, "SELECT * FROM runs WHERE name = 'demo'")
    assert run is not None and run["stop_reason"] == "no_hypotheses"
    phases = [
        json.loads(e["data"])
        for e in rows(db, "SELECT data FROM events WHERE kind = 'research_done' ORDER BY id")
    ]
    waves = rows(db, "SELECT * FROM waves ORDER BY number")
    assert len(phases) == len(waves) + 1 >= 3
    # Phase 1 fills the queue with the miners; the model is not asked while enough is ready.
    assert phases[0]["mined"] == len(PATCHES) + 1 and not phases[0]["call_ids"]
    # Phase 2, after wave 1's post-mortem: the model repairs the patch whose checks failed, proposes
    # a hypothesis and writes the gap's patch, so there is a wave 2.
    second = phases[1]
    assert (second["repaired"], second["generated"], second["patched"]) == (1, 1, 1), second
    assert second["call_ids"] and not second["failures"]
    calls = rows(db, "SELECT id, purpose FROM llm_calls WHERE error IS NULL ORDER BY id")
    assert {c["purpose"] for c in calls if c["id"] in second["call_ids"]} == {
        "repair",
        "queries",
        "research",
        "patch",
    }
    assert [c["purpose"] for c in calls].count("reflect") == len(waves)  # each wave's post-mortem
    failed = one(db, "SELECT * FROM experiments WHERE status = 'checks_failed'")
    assert failed is not None and failed["wave_id"] == waves[0]["id"]
    repair = one(db, "SELECT * FROM patches WHERE repair_of = ?", [failed["patch_id"]])
    assert repair is not None and repair["author_kind"] == "llm"
    repaired = one(db, "SELECT * FROM experiments WHERE patch_id = ?", [repair["id"]])
    assert repaired is not None and repaired["wave_id"] == waves[1]["id"]
    # The model's own hypothesis cites the passage it was shown.
    hyp = one(db, "SELECT * FROM hypotheses WHERE origin = 'llm'")
    assert hyp is not None and hyp["llm_call_id"] in second["call_ids"]
    cited = one(
        db,
        "SELECT e.kind FROM hypothesis_evidence he JOIN evidence e ON e.id = he.evidence_id "
        "WHERE he.hypothesis_id = ?",
        [hyp["id"]],
    )
    assert cited == {"kind": "passage"}
    # Its patch (phase 3) makes the change the repair already measured: a repeat, not run again,
    # and nothing else was left to try.
    assert phases[2]["patched"] == 1 and phases[2]["repeats"] == 1
    assert hyp["repeat_of"] == failed["hypothesis_id"]
    assert one(db, "SELECT id FROM experiments WHERE hypothesis_id = ?", [hyp["id"]]) is None
    assert [w["id"] for w in result.waiting] == [hyp["id"]]
    assert f"a repeat of #{failed['hypothesis_id']}" in result.waiting[0]["why"]
    # The gap hypothesis got the model's patch and was measured, with its provenance.
    gap_hyp = one(db, "SELECT * FROM hypotheses WHERE origin = 'miner:gap'")
    assert gap_hyp is not None
    patch = one(db, "SELECT * FROM patches WHERE hypothesis_id = ?", [gap_hyp["id"]])
    assert patch is not None and patch["author_kind"] == "llm" and patch["llm_call_id"] in second["call_ids"]
    exp = one(db, "SELECT * FROM experiments WHERE patch_id = ?", [patch["id"]])
    assert exp is not None and exp["status"] in ("kept", "discarded", "inconclusive"), exp
    gap_outcome = next(o for o in [*result.kept, *result.others] if "RMS_NORM+MUL" in o.title)
    assert any(ref.startswith("gap:") for ref in gap_outcome.sources)
    # The summary says what each phase found.
    text = "\n".join(summary_lines(result))
    assert f"Research phases (the autopilot, miners and {llm.litellm_model}):" in text
    assert "  phase 2, after wave 1's post-mortem: 1 generated, 1 patched, 1 repaired" in text
    assert "      model idea   Explain the softmax passes in a comment" in text
    assert "      model patch  Fuse RMS_NORM+MUL in the cpu backend" in text
    note = one(db, "SELECT meta FROM evidence WHERE kind = 'note'")
    assert note is not None and json.loads(note["meta"])["author"] == llm.litellm_model
    db.conn.close()
