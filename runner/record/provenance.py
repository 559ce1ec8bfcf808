"""Provenance: the rows along a winner's chain, walked forwards and backwards.

Provenance chain, every link a row (DESIGN.md):
`winner commit -> experiment -> patch -> hypothesis -> evidence -> source (URL, repo@sha, file:line)`.
`provenance()` walks it forwards from an experiment (or a commit sha), `led_to()` backwards from a
source, an evidence id or a free-form source ref to the experiments and winners it led to.
`gather_chain()` reads the rows once; runner.record.winners commits from the same rows. The refs
themselves are runner.record.sources'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from kb.errors import UserError
from kb.jsoncol import decoded_list
from kb.store import experiments as experiment_store
from kb.store import hypotheses as hypothesis_store
from kb.store import provenance as store
from kb.store import run_records, waves
from kb.store import winners as winner_store
from kb.store.provenance import CitedEvidence
from kb.store.tables import DecisionRow, ExperimentRow, HypothesisRow, PatchRow, RunRow, WaveRow
from runner.record.history import latest_decision_rows
from runner.record.sources import evidence_refs, evidence_rows, location, source_refs


@dataclass(frozen=True)
class Chain:
    experiment: ExperimentRow
    run: RunRow
    wave: WaveRow | None
    patch: PatchRow | None
    hypothesis: HypothesisRow | None
    decision: DecisionRow | None


def keep_decision(db: sqlite_utils.Database, experiment_id: int) -> DecisionRow | None:
    return store.keep_decision(db, experiment_id)


def final_decision(db: sqlite_utils.Database, experiment_id: int) -> DecisionRow | None:
    """The runner's last word on an experiment: its final decision, else its latest one."""
    return latest_decision_rows(db, [experiment_id]).get(experiment_id)


def gather_chain(db: sqlite_utils.Database, experiment_id: int, *, keep: bool = False) -> Chain:
    """Rows along the chain; `keep` picks the keep decision (what a winner commit reports)."""
    exp = experiment_store.row(db, experiment_id)
    if exp is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    run = run_records.row(db, exp["run_id"])
    assert run is not None  # foreign key
    wave = waves.get(db, exp["wave_id"]) if exp["wave_id"] else None
    patch = hypothesis_store.patch_row(db, exp["patch_id"]) if exp["patch_id"] else None
    hid = exp.get("hypothesis_id") or (patch["hypothesis_id"] if patch else None)
    hyp = hypothesis_store.stored(db, hid) if hid else None
    decision = (keep and keep_decision(db, experiment_id)) or final_decision(db, experiment_id)
    return Chain(exp, run, wave, patch, hyp, decision)


# --- provenance -------------------------------------------------------------------------------


def _resolve_ref(db: sqlite_utils.Database, ref: str) -> dict[str, Any]:
    """What a free-form ref points at in the knowledge base, when it does."""
    out: dict[str, Any] = {"ref": ref}
    match = re.fullmatch(r"(gap|passage|evidence):(\d+)", ref)
    if match:
        ev = store.evidence(db, int(match[2]))
        out["evidence_id"] = ev["id"] if ev else None
        out["source_id"] = ev["source_id"] if ev else None
        return out
    match = re.fullmatch(r"fork:([^@]+)@(\S+)", ref)
    if match:
        src = store.fork_source(db, match[1])
        out.update(fork=match[1], sha=match[2], source_id=src["id"] if src else None)
        if src:
            out["repo"] = src["canonical_url"] or src["url"]
        return out
    if re.match(r"https?://", ref):
        out.update(url=ref, source_id=store.source_id_by_url(db, ref))
    return out


def _evidence_json(ev: CitedEvidence) -> dict[str, Any]:
    return {
        "id": ev["id"],
        "kind": ev["kind"],
        "ref": ev["ref"],
        "title": ev["title"],
        "section": ev["section"],
        "note": ev["note"],
        "refs": evidence_refs(ev),
        "location": location(ev),
        "source": {
            "id": ev["source_id"],
            "kind": ev["source_kind"],
            "name": ev["source_name"],
            "title": ev["source_title"],
            "url": ev["canonical_url"] or ev["source_url"],
            "commit": ev["commit_sha"] or ev["fusion_commit"] or ev["source_commit"],
        },
        **(
            {"file": ev["fusion_file"], "line": ev["fusion_line"], "backend": ev["backend"], "ops": ev["ops"]}
            if ev["fusion_file"]
            else {}
        ),
        **({"sha": ev["commit_sha"], "subject": ev["commit_subject"]} if ev["commit_sha"] else {}),
    }


def provenance(db: sqlite_utils.Database, experiment_id: int) -> dict[str, Any]:
    """The chain of one experiment: winner commit, experiment, decision, patch, hypothesis, evidence
    (each with its source: URL, repo@sha, file:line) and free-form source refs, as JSON-ready data."""
    chain = gather_chain(db, experiment_id)
    exp, run, hyp, patch = chain.experiment, chain.run, chain.hypothesis, chain.patch
    winner = winner_store.of_experiment(db, experiment_id)
    d = chain.decision
    hid = hyp["id"] if hyp else None
    free = store.free_refs(db, hid)
    return {
        "experiment": {
            "id": exp["id"],
            "title": exp["title"],
            "kind": exp["kind"],
            "status": exp["status"],
            "reason": exp["reason"],
            "run_id": run["id"],
            "run": run["name"],
            "wave": chain.wave["number"] if chain.wave else None,
            "baseline_commit": exp["baseline_commit"],
            "candidate_commit": exp["candidate_commit"],
            "log_dir": exp["log_dir"],
        },
        "decision": None
        if d is None
        else {
            "id": d["id"],
            "verdict": d["verdict"],
            "metric": d["metric"],
            "effect": d["effect"],
            "ci": [d["ci_low"], d["ci_high"]],
            "pairs": d["pairs"],
            "p_value": d["p_value"],
            "q_value": d["q_value"],
            "noise": d["noise"],
            "reason": d["reason"],
        },
        "winner": None
        if winner is None
        else {
            "id": winner["id"],
            "commit": winner["commit_sha"],
            "branch": run["branch"] or f"autoresearch/{run['name']}",
            "patch_file": winner["patch_file"],
            "position": winner["position"],
        },
        "patch": None
        if patch is None
        else {
            "id": patch["id"],
            "files": decoded_list(patch["files"]),
            "author_kind": patch["author_kind"],
            "author": patch["author"],
            "diff_sha": patch["diff_sha"],
            "llm_call_id": patch["llm_call_id"],
        },
        "hypothesis": None
        if hyp is None
        else {
            "id": hyp["id"],
            "title": hyp["title"],
            "rationale": hyp["rationale"],
            "origin": hyp["origin"],
            "status": hyp["status"],
            "llm_call_id": hyp["llm_call_id"],
        },
        "evidence": [_evidence_json(ev) for ev in evidence_rows(db, hid)] if hid else [],
        "source_refs": [_resolve_ref(db, ref) for ref in free],
        "sources": source_refs(db, hid),
    }


def experiment_for_commit(db: sqlite_utils.Database, sha: str) -> int:
    """The experiment a winner commit came from (a unique prefix of the sha is enough)."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", sha):
        raise UserError(f"{sha}: not a commit sha")
    found = store.winner_experiments_by_prefix(db, sha.lower())
    if not found:
        raise UserError(f"{sha}: no winner commit with this sha")
    if len(found) > 1:
        raise UserError(f"{sha}: ambiguous, {len(found)} winner commits start with it")
    return found[0]


def led_to(
    db: sqlite_utils.Database,
    *,
    source_id: int | None = None,
    evidence_id: int | None = None,
    ref: str | None = None,
) -> dict[str, Any]:
    """The reverse walk: from a source, an evidence id or a free-form ref to the hypotheses,
    experiments and winners it led to. Exactly one of the three must be given."""
    if sum(x is not None for x in (source_id, evidence_id, ref)) != 1:
        raise UserError("led_to: give exactly one of source_id, evidence_id, ref")
    evidence_ids: list[int] = []
    refs: list[str] = []
    like: list[str] = []
    if evidence_id is not None:
        if store.evidence(db, evidence_id) is None:
            raise UserError(f"evidence {evidence_id}: no such evidence id")
        evidence_ids = [evidence_id]
    elif source_id is not None:
        src = store.source(db, source_id)
        if src is None:
            raise UserError(f"source {source_id}: no such source")
        evidence_ids = store.evidence_ids_of_source(db, source_id)
        refs = [u for u in (src["url"], src["canonical_url"]) if u]
        if src["kind"] == "fork" and src["name"]:
            like.append(f"fork:{src['name']}@%")
    else:
        assert ref is not None
        refs = [ref]
        resolved = _resolve_ref(db, ref)
        if resolved.get("evidence_id"):
            evidence_ids = [resolved["evidence_id"]]
    for eid in evidence_ids:
        refs.extend([f"gap:{eid}", f"passage:{eid}", f"evidence:{eid}"])

    hyp_ids: set[int] = set()
    if evidence_ids:
        hyp_ids |= store.hypotheses_citing(db, evidence_ids)
    if refs:
        hyp_ids |= store.hypotheses_with_refs(db, refs)
    for pattern in like:
        hyp_ids |= store.hypotheses_with_ref_like(db, pattern)
    if not hyp_ids:
        return {"hypotheses": [], "experiments": []}
    ordered = sorted(hyp_ids)
    hypotheses = store.hypothesis_summaries(db, ordered)
    experiments: list[dict[str, Any]] = []
    for exp in store.experiments_of_hypotheses(db, ordered):
        d = final_decision(db, exp["id"])
        experiments.append(
            {
                **exp,
                "effect": d["effect"] if d else None,
                "ci": [d["ci_low"], d["ci_high"]] if d else [None, None],
                "pairs": d["pairs"] if d else 0,
            }
        )
    return {"hypotheses": hypotheses, "experiments": experiments}
