"""The queue of a big fork: 1,250 mined hypotheses from a fork of 1,375 commits (tests/runner/
queue_support.py, TEST_QUEUE; benchmarks/bench_queue.py times 10,000), ranked, grouped into families,
filtered and paged through the CLI; commits of other backends and docs/server/build work left out of
the queue but still browsable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kb import gitrepo
from kb.db import insert, now, one, rows
from kb.store.queue import QueueFilter, queue_page
from kb.workspace import Workspace
from runner import profile
from runner.hypotheses import runnable
from runner.rank import rerank
from runner.research.miners.forks import FORK_EFFECT
from tests.runner.queue_support import TEST_QUEUE, MinedQueue, copy_queue
from tui.cli import main

SECONDS = TEST_QUEUE["seconds"]  # fork functions with a second commit: families of two
QUEUED = TEST_QUEUE["cpu_functions"] + SECONDS + TEST_QUEUE["core"] + TEST_QUEUE["model"]


@pytest.fixture
def ws(queue_template: MinedQueue, tmp_path: Path) -> Workspace:
    return copy_queue(queue_template, tmp_path / "ws")


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner().invoke(main, ["-w", str(ws.root), *args], catch_exceptions=False)


def hyp(ws: Workspace, subject: str) -> dict[str, Any]:
    found = one(ws.db(), "SELECT * FROM hypotheses WHERE title LIKE ?", [f"Port fast@%: {subject}"])
    assert found is not None, subject
    found["rank_why"] = json.loads(found["rank_why"])
    return found


def part(h: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in h["rank_why"]["parts"] if p["name"] == name)


def test_mining_queues_1250_and_leaves_the_rest_browsable(queue_template: MinedQueue, ws: Workspace) -> None:
    report, repos = queue_template.report, queue_template.repos
    assert len(report["fork_added"]) == repos.queued == QUEUED
    assert report["left_out"] == {"cuda": 75, "docs": 25, "server": 13, "build": 12}
    assert report["skipped"] == {"not_target_backend": 75, "skipped_area": 50}
    assert len(report["rebased"]) == len(repos.soft) > 0 and len(report["needs_port"]) == len(repos.hard) > 0
    assert report["ranked"]["ranked"] == QUEUED
    db = ws.db()
    counts = dict(db.execute("SELECT status, count(*) FROM hypotheses GROUP BY status").fetchall())
    assert counts == {"proposed": QUEUED - len(repos.hard), "needs_port": len(repos.hard)}
    # Left out of the queue, still browsable as fork commits.
    listed = json.loads(cli(ws, "kb", "commits", "fast", "--path", "ggml/src/ggml-cuda/", "--json").output)
    assert len(listed) == 75 and all(c["subject"].startswith("CUDA: faster") for c in listed)
    assert not rows(db, "SELECT id FROM hypotheses WHERE title LIKE '%CUDA:%' OR title LIKE '%docs:%'")
    text = cli(ws, "hypotheses", "list", "--backend", "cuda").output
    assert text.strip() == "No hypotheses with backend cuda (`autoresearch hypotheses list` shows them all)."


def test_a_conflicting_commit_is_rebased_by_a_three_way_merge(
    queue_template: MinedQueue, ws: Workspace
) -> None:
    repos = queue_template.repos
    db = ws.db()
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    f = repos.soft[0]
    h = hyp(ws, f"ggml-cpu: unroll cpu_op_{f}")
    patch = one(db, "SELECT * FROM patches WHERE hypothesis_id = ?", [h["id"]])
    commit = one(db, "SELECT * FROM commits WHERE sha = ?", [patch["author"]])
    assert (
        h["status"] == "proposed" and patch["apply_status"] == "ok" and patch["author_kind"] == "fork_commit"
    )
    assert patch["author"] == repos.shas[f"ggml-cpu: unroll cpu_op_{f}"]
    assert "three-way merge" in h["notes"] and "rebased" in h["notes"]
    # The fork's own diff does not apply; the rebased one does, and keeps the baseline's own edit.
    assert gitrepo.apply_check(repo, baseline, commit["diff"]) is not None
    assert gitrepo.apply_check(repo, baseline, patch["diff"]) is None
    merged = gitrepo.commit_patch(repo, baseline, patch["diff"], "candidate")
    text = gitrepo.show_file(repo, merged, f"ggml/src/ggml-cpu/ops{f // 10}.c") or ""
    assert f"/* fork A {f} */" in text and "x[8] = x[8] * 8.5f; /* upstream */" in text
    assert part(h, "applies")["why"] == "applies after a three-way merge onto the baseline"


def test_a_true_conflict_waits_as_needs_port_and_never_runs(
    queue_template: MinedQueue, ws: Workspace
) -> None:
    f = queue_template.repos.hard[0]
    h = hyp(ws, f"ggml-cpu: unroll cpu_op_{f}")
    db = ws.db()
    patch = one(db, "SELECT * FROM patches WHERE hypothesis_id = ?", [h["id"]])
    assert h["status"] == "needs_port" and patch["apply_status"] == "conflict"
    assert (
        "three-way merge with the fork parent as base: conflicts in ggml/src/ggml-cpu/"
        in patch["apply_error"]
    )
    ready = {r["hypothesis_id"] for r in runnable(db, require_approval=False)}
    assert h["id"] not in ready and len(ready) == QUEUED - len(queue_template.repos.hard)
    listed = json.loads(cli(ws, "hypotheses", "list", "--status", "needs_port", "--json").output)
    assert len(listed) == len(queue_template.repos.hard) and {r["apply_status"] for r in listed} == {
        "conflict"
    }


def test_claims_count_for_the_metric_they_name(ws: Workspace) -> None:
    """The primary metric is tg128: a TG claim sets the expected effect; a PP claim does not."""
    tg, pp, unnamed, none = (hyp(ws, f"ggml-cpu: unroll cpu_op_{f}") for f in (10, 11, 12, 13))
    assert tg["expected_effect"] == 0.12
    assert pp["expected_effect"] == FORK_EFFECT  # +35% pp is no claim about tg
    assert unnamed["expected_effect"] == 0.08
    assert none["expected_effect"] == FORK_EFFECT
    assert "claims +12% tg" in part(tg, "claim")["why"]
    assert (
        "claims +35% pp; the primary metric is tg128 (pp is a guard): counts little"
        in part(pp, "claim")["why"]
    )
    assert "counts part-way toward tg128" in part(unnamed, "claim")["why"]
    claim = [part(h, "claim")["points"] for h in (tg, pp, unnamed, none)]
    assert claim[0] > claim[2] > claim[1] > claim[3] == 0
    # Otherwise alike (same backend, size, applying, a day apart): the ranks follow the claims.
    assert tg["rank"] > unnamed["rank"] > pp["rank"] > none["rank"]
    assert part(tg, "backend")["why"] == "touches cpu files only" and part(tg, "backend")["points"] == 25


def test_families_run_their_best_member_first(ws: Workspace) -> None:
    db = ws.db()
    first, second = hyp(ws, "ggml-cpu: unroll cpu_op_5"), hyp(ws, "ggml-cpu: vectorise cpu_op_5")
    assert first["family"] == second["family"] == first["id"]  # the series' first commit names it
    assert one(db, "SELECT count(*) AS n FROM hypotheses WHERE family IS NOT NULL") == {"n": 2 * SECONDS}
    lead, waiting = (first, second) if first["rank"] >= second["rank"] else (second, first)
    row = {r.id: r for r in queue_page(db, QueueFilter(search="cpu_op_5"), limit=None).rows}
    assert row[waiting["id"]].waits_behind == lead["id"] and row[lead["id"]].waits_behind is None
    # The waiting member runs after every hypothesis that does not wait.
    order = [r["hypothesis_id"] for r in runnable(db, require_approval=False)]
    waiters = {
        r["id"] for r in rows(db, "SELECT id FROM hypotheses WHERE family IS NOT NULL AND id != family")
    }
    assert len(waiters) == SECONDS and order.index(waiting["id"]) > order.index(lead["id"])
    first_waiter = min(order.index(i) for i in waiters)
    assert set(order[first_waiter:]) >= waiters and not waiters & set(order[:first_waiter])
    # Once the leader has been measured, the other member leads.
    run = insert(db, "runs", {"name": "r1", "status": "running", "started_at": now()})
    measured = {"run_id": run, "hypothesis_id": lead["id"], "title": "x", "status": "discarded"}
    insert(db, "experiments", {**measured, "created_at": now()})
    row = {r.id: r for r in queue_page(db, QueueFilter(search="cpu_op_5"), limit=None).rows}
    assert row[waiting["id"]].waits_behind is None and row[lead["id"]].outcome == "discarded"
    shown = cli(ws, "hypotheses", "show", str(waiting["id"])).output
    assert f"family {lead['id']}: 2 fork commits on the same functions; this one leads it" in shown


def test_list_pages_filters_and_sorts(ws: Workspace) -> None:
    everything = json.loads(cli(ws, "hypotheses", "list", "--json").output)
    assert len(everything) == QUEUED
    ranks = [h["rank"] for h in everything if not h["waits_behind"]]
    assert ranks == sorted(ranks, reverse=True)  # the queue order: by rank (no person set a priority)
    text = cli(ws, "hypotheses", "list").output.splitlines()
    assert len([line for line in text if line.split()[1:2] in (["proposed"], ["needs_port"])]) == 50
    assert "1-50 of 1,250 (sorted by rank). 1,200 more: --offset 50 (--limit N for more per page)." in text
    page = json.loads(cli(ws, "hypotheses", "list", "--limit", "20", "--offset", "40", "--json").output)
    assert [h["id"] for h in page] == [h["id"] for h in everything[40:60]]
    last = cli(ws, "hypotheses", "list", "--offset", "1240").output
    assert "1,241-1,250 of 1,250 (sorted by rank)." in last and "more:" not in last

    def ids(*args: str) -> list[dict[str, Any]]:
        result = cli(ws, "hypotheses", "list", *args, "--json")
        assert result.exit_code == 0, result.output
        return list(json.loads(result.output))

    core = ids("--path", "ggml/src/ggml.c")
    assert len(core) == TEST_QUEUE["core"] and all("core: simplify" in h["title"] for h in core)
    cpu = TEST_QUEUE["cpu_functions"] + SECONDS
    assert len(ids("--path", "ggml/src/ggml-cpu")) == len(ids("--path", "ggml/src/ggml-cpu/")) == cpu
    assert len(ids("--backend", "cpu")) == cpu  # core and model code belong to no backend
    found = ids("--search", "vectorise", "--status", "proposed")
    assert len(found) == SECONDS and all("vectorise" in h["title"] for h in found)
    assert len(ids("--search", "RTX")) == 0  # the CUDA commits' words: not queued
    by_claim = ids("--search", "TG 12% faster", "--limit", "5")
    assert by_claim and all(h["expected_effect"] == 0.12 for h in by_claim)  # found in the cited evidence
    assert len(ids("--outcome", "none")) == QUEUED and len(ids("--origin", "fork")) == QUEUED
    assert ids("--origin", "gap") == []
    effect = ids("--sort", "effect", "--limit", "3")
    assert [h["expected_effect"] for h in effect] == [0.12, 0.12, 0.12]
    recent = ids("--sort", "recent", "--limit", "1")[0]
    assert recent["rank_why"]["when"] == max(h["rank_why"]["when"] for h in everything)
    bad = cli(ws, "hypotheses", "list", "--path", " ")
    assert bad.exit_code == 1 and bad.output.strip() == "Error: --path: must not be empty"
    bad = cli(ws, "hypotheses", "list", "--sort", "size")
    assert bad.exit_code == 2 and "'size' is not one of" in bad.output


def test_a_persons_priority_overrides_the_rank(ws: Workspace) -> None:
    everything = json.loads(cli(ws, "hypotheses", "list", "--json").output)
    low, top = everything[-1], everything[0]
    assert cli(ws, "hypotheses", "prioritize", str(low["id"]), "2").exit_code == 0
    first = json.loads(cli(ws, "hypotheses", "list", "--limit", "2", "--json").output)
    assert [h["id"] for h in first] == [low["id"], top["id"]] and first[0]["priority_set"] is True
    assert cli(ws, "hypotheses", "prioritize", str(top["id"]), "-1").exit_code == 0
    assert json.loads(cli(ws, "hypotheses", "list", "--json").output)[-1]["id"] == top["id"]
    assert runnable(ws.db(), require_approval=False)[0]["hypothesis_id"] == low["id"]
    assert (
        f"#{low['id']} back to its rank"
        in cli(ws, "hypotheses", "prioritize", str(low["id"]), "--clear").output
    )
    again = json.loads(cli(ws, "hypotheses", "list", "--json").output)
    assert again[0]["id"] == everything[1]["id"] and again[-1]["id"] == top["id"]
    assert [h["id"] for h in again[1:-1]].index(low["id"]) == len(again) - 3  # back at its place
    bad = cli(ws, "hypotheses", "prioritize", str(low["id"]))
    assert bad.exit_code == 1 and "give a PRIORITY or --clear" in bad.output


def test_a_profile_ranks_the_hot_functions_first(ws: Workspace) -> None:
    db = ws.db()
    baseline = ws.settings.target.baseline_commit
    found = profile.shares([{"cpu_op_3": 0.38, "void ns::cpu_op_4(float*, int) [clone .lto]": 0.06}])
    assert profile.record(db, baseline, found, "validate") == 2
    result = cli(ws, "hypotheses", "rank")
    assert result.exit_code == 0 and f"Ranked {QUEUED} hypotheses" in result.output
    top = json.loads(cli(ws, "hypotheses", "list", "--limit", "1", "--json").output)
    # The hot function's two commits (a family: the newer ranks a little higher here) lead the
    # queue: one first, the other waiting behind it.
    family = [hyp(ws, f"ggml-cpu: {verb} cpu_op_3") for verb in ("unroll", "vectorise")]
    [follow] = [h for h in family if h["id"] != top[0]["id"]]
    assert top[0]["id"] in {h["id"] for h in family} and top[0]["waits_behind"] is None
    listed = json.loads(cli(ws, "hypotheses", "list", "--search", "cpu_op_3", "--json").output)
    assert next(h for h in listed if h["id"] == follow["id"])["waits_behind"] == top[0]["id"]
    assert part(follow, "hot")["points"] == 20 and follow["family"] == family[0]["id"]
    hot = next(p for p in top[0]["rank_why"]["parts"] if p["name"] == "hot")
    assert hot["points"] == 20 and "cpu_op_3 (38%) of the baseline's profile" in hot["why"]
    four = hyp(ws, "ggml-cpu: unroll cpu_op_4")
    assert part(four, "hot")["points"] == 12.0  # 6% of the profile: 0.6 of the part
    shown = cli(ws, "hypotheses", "show", str(top[0]["id"])).output
    assert "hot       20.0/20  touches cpu_op_3 (38%) of the baseline's profile" in shown
    assert rerank(ws, db, ids=[top[0]["id"]]).ranked == 1
