"""Writing an inventory to the workspace database as citable evidence, all in one transaction.

One `sources` row (kind `inventory`) per scanned tree and commit. Scanning the same tree at the same
commit again replaces that scan's evidence in place: rows keep their ids when their key (kind +
`fusion:<backend>:<ops>`, `gap:<ops>`, `single:<backend>:<op>`) is still found, so hypotheses citing
them stay valid; rows no longer found are deleted, unless a hypothesis or a wave cites them, in
which case they stay, marked stale (and leave the `fusions` table).

Evidence rows:
- `fusion`: title `RMS_NORM+MUL`, section = backend, meta {file, line, ops, raw_ops, how, sites};
  plus a `fusions` row (kind `graph`).
- `gap`: title = ops, section = the backends missing it, meta {ops, present, missing,
  target_backend, target_missing, where}.
- `single_op`: title = op, section = backend, meta {file, line, ops}; plus a `fusions` row (kind
  `single`). Never gaps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlite_utils

from kb.db import insert, is_cited, now, one, rows, transaction, update
from kb.inventory.model import Fusion, Gap, Inventory, SingleOp
from kb.jsoncol import decoded_dict


def _fusion_row(f: Fusion, commit: str | None) -> dict[str, Any]:
    ops = " ".join(f.ops)
    sites = "; ".join(f"{file}:{line}" for file, line in f.sites)
    body = (
        f"{f.key} is fused in the {f.backend} backend ({f.how}) at {f.file}:{f.line}. "
        f"Ops: {ops}. Code: {f.snippet}" + (f" Also decided at: {sites}." if len(f.sites) > 1 else "")
    )
    meta = {
        "file": f.file,
        "line": f.line,
        "ops": list(f.ops),
        "raw_ops": list(f.raw_ops),
        "how": f.how,
        "sites": [{"file": file, "line": line} for file, line in f.sites],
        "commit": commit,
    }
    return {
        "kind": "fusion",
        "ref": f"fusion:{f.backend}:{f.key}",
        "title": f.key,
        "section": f.backend,
        "body": body,
        "meta": meta,
    }


def _gap_row(g: Gap, inv: Inventory) -> dict[str, Any]:
    where = {f.backend: f"{f.file}:{f.line}" for f in inv.fusions if f.ops == g.ops}
    target = inv.target_backend
    lead = f"Missing in the target backend {target}. " if g.target_missing else ""
    body = (
        f"Fusion gap {g.key}: {lead}Fused in {', '.join(g.present)}; not fused in {', '.join(g.missing)}. "
        f"Ops: {' '.join(g.ops)}. Evidence: " + "; ".join(f"{b} {w}" for b, w in where.items())
    )
    meta = {
        "ops": list(g.ops),
        "present": list(g.present),
        "missing": list(g.missing),
        "target_backend": target,
        "target_missing": g.target_missing,
        "where": where,
    }
    return {
        "kind": "gap",
        "ref": f"gap:{g.key}",
        "title": g.key,
        "section": ", ".join(g.missing),
        "body": body,
        "meta": meta,
    }


def _single_row(s: SingleOp) -> dict[str, Any]:
    body = (
        f"{s.op} runs as one fused kernel by construction in the {s.backend} backend "
        f"(e.g. softmax with its scale and mask), at {s.file}:{s.line}. Listed apart; not a gap."
    )
    return {
        "kind": "single_op",
        "ref": f"single:{s.backend}:{s.op}",
        "title": s.op,
        "section": s.backend,
        "body": body,
        "meta": {"file": s.file, "line": s.line, "ops": [s.op]},
    }


def store(
    db: sqlite_utils.Database, inv: Inventory, *, ref: str, label: str = "inventory"
) -> tuple[int, Inventory]:
    """Write `inv` as one inventory source; returns the source id and the inventory with gap ids set."""
    stamp = now()
    source_meta = {
        "backends": inv.backends,
        "target_backend": inv.target_backend,
        "files_scanned": inv.files_scanned,
        "unclassified": [u.__dict__ for u in inv.unclassified],
        "excluded": [u.__dict__ for u in inv.excluded],
        "counts": {"fusions": len(inv.fusions), "gaps": len(inv.gaps), "single_ops": len(inv.singles)},
    }
    title = f"Backend fusion inventory of {ref}" + (f" @ {inv.commit[:12]}" if inv.commit else "")
    wanted: list[dict[str, Any]] = [
        *(_fusion_row(f, inv.commit) for f in inv.fusions),
        *(_gap_row(g, inv) for g in inv.gaps),
        *(_single_row(s) for s in inv.singles),
    ]
    with transaction(db):
        found = one(
            db,
            "SELECT id FROM sources WHERE kind = 'inventory' AND ref = ? AND commit_sha IS ?",
            [ref, inv.commit],
        )
        if found is None:
            source_id = insert(
                db,
                "sources",
                {
                    "kind": "inventory",
                    "name": label,
                    "url": ref,
                    "ref": ref,
                    "commit_sha": inv.commit,
                    "title": title,
                    "meta": source_meta,
                    "created_at": stamp,
                    "updated_at": stamp,
                },
            )
        else:
            source_id = int(found["id"])
            update(db, "sources", source_id, {"title": title, "meta": source_meta, "updated_at": stamp})
        existing = {
            (r["kind"], r["ref"]): int(r["id"])
            for r in rows(db, "SELECT id, kind, ref FROM evidence WHERE source_id = ?", [source_id])
        }
        db.execute(
            "DELETE FROM fusions WHERE evidence_id IN (SELECT id FROM evidence WHERE source_id = ?)",
            [source_id],
        )
        ids: dict[tuple[str, str], int] = {}
        for row in wanted:
            key = (row["kind"], row["ref"])
            if key in existing:
                eid = existing[key]
                update(db, "evidence", eid, {k: row[k] for k in ("title", "section", "body", "meta")})
            else:
                eid = insert(
                    db, "evidence", {**row, "source_id": source_id, "position": None, "created_at": stamp}
                )
            ids[key] = eid
        for f in inv.fusions:
            insert(
                db,
                "fusions",
                {
                    "evidence_id": ids[("fusion", f"fusion:{f.backend}:{f.key}")],
                    "backend": f.backend,
                    "ops": f.key,
                    "kind": "graph",
                    "file": f.file,
                    "line": f.line,
                    "commit_sha": inv.commit,
                },
            )
        for s in inv.singles:
            insert(
                db,
                "fusions",
                {
                    "evidence_id": ids[("single_op", f"single:{s.backend}:{s.op}")],
                    "backend": s.backend,
                    "ops": s.op,
                    "kind": "single",
                    "file": s.file,
                    "line": s.line,
                    "commit_sha": inv.commit,
                },
            )
        for key, eid in existing.items():
            if key in ids:
                continue
            if is_cited(db, eid):
                meta_row = one(db, "SELECT meta FROM evidence WHERE id = ?", [eid])
                meta = decoded_dict(meta_row["meta"] if meta_row else None)
                meta["stale"] = True
                update(db, "evidence", eid, {"meta": meta})
            else:
                db.execute("DELETE FROM evidence WHERE id = ?", [eid])
    gaps = [replace(g, id=ids[("gap", f"gap:{g.key}")]) for g in inv.gaps]
    return source_id, replace(inv, gaps=gaps)
