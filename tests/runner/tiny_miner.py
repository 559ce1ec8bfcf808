"""A miner written for the registry's test: each paper passage that speaks of a multiply becomes a
hypothesis citing it. It lives here, not in the product; the test registers it with one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kb.search import search
from kb.store import hypotheses as hypothesis_store
from runner.hypotheses import add_hypothesis
from runner.research.miners.base import Mined

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace


class TinyMiner:
    name = "tiny"
    label = "multiply-idea"
    reasons = {"no_passage": "no paper passage speaks of a multiply (add one: `kb add-paper`)"}

    def mine(self, ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> Mined:
        mined = Mined()
        for hit in search(db, "multiply", kind="paper"):
            key = f"tiny:{hit.id}"
            if hypothesis_store.by_dedupe_key(db, key) is not None:
                mined.skip("already_mined")
                continue
            hid = add_hypothesis(
                db,
                f"Fold the multiply that passage {hit.id} names into its pass",
                origin=f"miner:{self.name}",
                dedupe_key=key,
                evidence_ids=[hit.id],
            )
            if hid is not None:
                mined.added.append(hid)
        if not mined.added and not mined.skipped:
            mined.skip("no_passage")
        return mined
