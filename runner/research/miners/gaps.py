"""The backend-gap miner: each inventory gap (ops fused in some backends, not in the target
backend) becomes a hypothesis citing the gap row and the fusion rows of the backends that already
have it. Its dedupe key is `gap:<backend>:<ops>`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kb.jsoncol import decoded_dict
from kb.store import hypotheses as hypothesis_store
from kb.store import research as store
from runner.hypotheses import add_hypothesis
from runner.research.miners.base import Mined
from runner.research.priority import priority

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace

# A fusion saves one write and one re-read of the intermediate tensor per fused op; on a memory-bound
# path that is a few percent (the published llama.cpp run: RMS_NORM+MUL and softmax fusions).
GAP_EFFECT, GAP_CONFIDENCE, GAP_COST = 0.02, 0.6, 1.5


class GapMiner:
    name = "gap"
    label = "backend-gap"
    reasons = {
        "already_mined": "already a hypothesis (see `hypotheses list`)",
        "not_missing_in_target": "gaps the target backend ({target}) does not have: "
        "kb.inventory.target_backend names the backend being optimised",
    }

    def mine(self, ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> Mined:
        return mine_gaps(ws, db)


def _ops_key(ops: Any) -> str:
    """Inventory ops as one key: a list ["RMS_NORM", "MUL"] or a string "RMS_NORM+MUL"."""
    if isinstance(ops, list | tuple):
        return "+".join(str(op) for op in ops)
    return str(ops or "").strip()


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def mine_gaps(ws: Workspace, db: sqlite_utils.Database) -> Mined:
    """One hypothesis per inventory gap missing in the target backend (kb.inventory.target_backend)."""
    target = ws.settings.kb.inventory.target_backend
    report = Mined()
    for gap in store.gaps(db):
        meta = decoded_dict(gap["meta"])
        ops = _ops_key(meta.get("ops") or gap["title"])
        missing = _names(meta.get("missing"))
        present = _names(meta.get("present"))
        if not ops or target not in missing:
            report.skip("not_missing_in_target")
            continue
        key = f"gap:{target}:{ops}"
        if hypothesis_store.by_dedupe_key(db, key) is not None:
            report.skip("already_mined")
            continue
        fusions = store.fusions_in(db, ops, present)
        where = ", ".join(f"{f['backend']} ({f['file']}:{f['line']})" for f in fusions) or ", ".join(present)
        n_ops = max(len(ops.split("+")), 2)
        rationale = (
            f"{ops} is fused in {where} but not in the {target} backend. There the ops run as "
            f"{n_ops} separate passes, each writing an intermediate tensor that the next one reads "
            f"back; a fused kernel makes one pass over memory. The other backends' kernels show the "
            f"pattern and the graph condition under which it is safe to fuse (e.g. the intermediate "
            f"result has no other consumer)."
        )
        hid = add_hypothesis(
            db,
            f"Fuse {ops} in the {target} backend",
            rationale=rationale,
            origin="miner:gap",
            expected_effect=GAP_EFFECT,
            confidence=GAP_CONFIDENCE,
            cost=GAP_COST,
            priority=priority(GAP_EFFECT, GAP_CONFIDENCE, GAP_COST),
            risk="correctness: the fused path must match the unfused result within tolerance",
            dedupe_key=key,
            evidence_ids=[gap["id"], *(f["evidence_id"] for f in fusions)],
        )
        if hid is not None:
            report.added.append(hid)
    return report
