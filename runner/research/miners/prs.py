"""The pull-request miner: each of the upstream's pull requests whose change the baseline lacks
(`kb add-prs`: open, of unknown state, or merged after the baseline) becomes one hypothesis, its
patch the pull request's combined diff (merge-base..head), checked against the baseline like a
fork commit's: applied as it is, else by a three-way merge, else it waits as `needs_port`. It
cites the pull request's commits (fork commits of its own source, which the fork miner leaves to
this one), its rationale is the pull request's title and description, and its expected effect the
gain its title or description claims (kb.commit_facts: "+12% pp" is a prompt-processing claim);
then the queue is ranked as for every miner (runner/rank.py).

The fork miner's filters apply: paths of interest, other backends only, skipped areas, protected
paths. Re-running adds nothing twice: the dedupe key is the pull request and its head
(`pr:<remote>#<number>@<head>`), so a pull request pushed to again is mined again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kb.commit_facts import commit_facts, expected_effect, metric_kind, parse_claims
from kb.db import transaction
from kb.jsoncol import decoded_list
from kb.store import hypotheses as hypothesis_store
from kb.store import prs as store
from kb.store.tables import PullRequestRow
from runner.harness.prepare import protected_paths, refusal
from runner.hypotheses import add_hypothesis, add_note, add_patch
from runner.research.miners.base import Mined
from runner.research.miners.forks import (
    CONFLICT_COST,
    FORK_CONFIDENCE,
    FORK_COST,
    FORK_EFFECT,
    _conflict_text,
    _matches,
    left_out,
)
from runner.research.priority import priority

if TYPE_CHECKING:
    import sqlite_utils

    from kb.gitrepo import ThreeWay
    from kb.workspace import Workspace


def dedupe_key(pr: PullRequestRow) -> str:
    return f"pr:{pr['remote']}#{pr['number']}@{pr['head_sha']}"


class PullRequestMiner:
    name = "pr"
    label = "pull-request"
    reasons = {
        "already_mined": "already a hypothesis (see `hypotheses list`)",
        "outside_paths_of_interest": "pull requests outside target.paths_of_interest (widen it)",
        "already_in_baseline": "pull requests whose change the baseline already contains",
        "protected_path": "pull requests that touch a protected path (the benchmark, checks, target.protect)",
        "truncated_diff": "pull requests whose diff was cut at kb.max_commit_diff_bytes",
        "empty_diff": "pull requests that change nothing against the baseline",
        "not_target_backend": "pull requests that touch only other backends' files "
        "(hypotheses.skip_other_backends)",
        "skipped_area": "pull requests that touch only hypotheses.skip_areas (docs, web, server, build, ...)",
    }

    def mine(self, ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> Mined:
        from kb import gitrepo
        from kb.inventory.layout import HistoryBackends

        settings = ws.settings
        report = Mined(details={"pr_needs_port": []})
        pulls = store.minable(db)
        if not pulls:
            return report
        repo = gitrepo.open_repo(ws.mirror_path)
        baseline = settings.target.baseline_commit or settings.target.baseline
        interest = settings.target.paths_of_interest
        protected = protected_paths(ws, settings)
        primary = metric_kind(settings.metric.primary)
        backends = HistoryBackends.for_paths(gitrepo.list_files(repo, baseline), settings.kb.inventory)
        for pr in pulls:
            if hypothesis_store.by_dedupe_key(db, dedupe_key(pr)) is not None:
                report.skip("already_mined")
                continue
            diff, files = pr["diff"] or "", [str(f) for f in decoded_list(pr["files"])]
            if pr["diff_truncated"]:
                report.skip("truncated_diff")
                continue
            if not diff.strip() or not files:
                report.skip("empty_diff")
                continue
            if interest and not any(_matches(path, interest) for path in files):
                report.skip("outside_paths_of_interest")
                continue
            text = f"{pr['title']}\n\n{pr['body'] or ''}"
            facts = commit_facts(files, text, backends)
            out = left_out(facts.backends, facts.areas, settings)
            if out is not None:
                report.leave_out(*out)
                continue
            if not queue_protected and refusal(files, protected):
                report.skip("protected_path")
                continue
            error = gitrepo.apply_check(repo, baseline, diff)
            merged: ThreeWay | None = None
            if error is not None:
                if gitrepo.apply_check(repo, baseline, diff, reverse=True) is None:
                    report.skip("already_in_baseline")
                    continue
                merged = gitrepo.three_way(repo, baseline, diff)
                if merged.diff is not None and gitrepo.apply_check(repo, baseline, merged.diff) is not None:
                    merged = None
            effect = expected_effect(parse_claims(text), primary) or FORK_EFFECT
            _add(db, report, pr, diff, files, error, merged, effect)
        return report


def _add(
    db: sqlite_utils.Database,
    report: Mined,
    pr: PullRequestRow,
    diff: str,
    files: list[str],
    error: str | None,
    merged: ThreeWay | None,
    effect: float,
) -> None:
    rebased = merged is not None and merged.diff is not None
    conflict = error is not None and not rebased
    cost = CONFLICT_COST if conflict else FORK_COST
    where = pr["url"] or f"{pr['remote']} #{pr['number']}"
    commits = store.commits_of(db, pr["source_id"])
    state = {
        "open": "open",
        "unknown": "of unknown state",
        "merged": "merged upstream after the baseline",
    }.get(pr["state"], pr["state"])
    rationale = (
        f"Pull request #{pr['number']} ({where}, {state}; {len(commits)} commits) changes "
        f"{', '.join(files[:8])}{' ...' if len(files) > 8 else ''}, and the baseline lacks the change. "
        f"{'Its description' if pr['described_by'] == 'api' else 'Its head commit says'}:\n"
        f"{pr['title']}\n{(pr['body'] or '').strip()[:1500]}"
    )
    risk = None
    if conflict:
        risk = "does not apply to the baseline, even with a three-way merge: needs a port"
    elif rebased:
        risk = "rebased onto the baseline by a three-way merge: review the merged hunks"
    with transaction(db):
        hid = add_hypothesis(
            db,
            f"PR #{pr['number']}: {pr['title']}",
            rationale=rationale,
            origin="miner:pr",
            status="needs_port" if conflict else "proposed",
            expected_effect=effect,
            confidence=FORK_CONFIDENCE,
            cost=cost,
            priority=priority(effect, FORK_CONFIDENCE, cost),
            risk=risk,
            dedupe_key=dedupe_key(pr),
            evidence_ids=[c["evidence_id"] for c in commits],
            source_refs=[f"pr:{where}@{pr['head_sha']}"],
        )
        if hid is None:
            return
        add_patch(
            db,
            hid,
            merged.diff if merged is not None and merged.diff is not None else diff,
            author_kind="fork_commit",
            author=pr["head_sha"],
            apply_status="conflict" if conflict else "ok",
            apply_error=_conflict_text(error, merged) if conflict else None,
        )
        if rebased:
            add_note(
                db,
                hid,
                "rebased onto the baseline by a three-way merge (base: the pull request's merge base)",
            )
    report.added.append(hid)
    if conflict:
        report.details["pr_needs_port"].append(hid)
