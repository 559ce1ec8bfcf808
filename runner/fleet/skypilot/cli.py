"""What `autoresearch fleet` asks of SkyPilot outside a run (through `SkyPilotFleet.outside_statuses`
and `down_recorded`): SkyPilot's own status of recorded clusters, and downing clusters (retrying
failed teardowns) while waiting for SkyPilot."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from kb.db import now
from kb.store import workers as store
from kb.store.tables import WorkerRow
from runner.fleet.base import _meta
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import LIVE
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS


def down_workers(
    db: sqlite_utils.Database, worker_ids: Sequence[int], *, wait: float = DOWN_WAIT_SECONDS
) -> list[WorkerRow]:
    """Down these recorded clusters (and retry failed teardowns), waiting for SkyPilot; the rows after."""
    sdk.sky_module()  # SkyPilot missing is the command's error, not a failed teardown of each cluster
    requests: dict[int, str] = {}
    for worker_id in worker_ids:
        row = store.row(db, worker_id)
        if row is None or row["backend"] != "skypilot":
            continue
        meta = _meta(row["meta"])
        cluster = str(meta.get("cluster") or row["name"])
        if meta.get("teardown") == "pending" and meta.get("down_request"):
            requests[worker_id] = str(meta["down_request"])
            continue
        try:
            requests[worker_id] = sdk.down(cluster)
        except Exception as exc:  # noqa: BLE001
            _set_meta(db, worker_id, teardown=f"failed: {sdk.error_line(exc)}")
            continue
        _set_meta(
            db,
            worker_id,
            teardown="pending",
            down_request=requests[worker_id],
            reason=meta.get("reason") or "downed by `autoresearch fleet down`",
        )
        if row["status"] in LIVE:
            store.update(db, worker_id, {"status": "down", "ended_at": now()})
    deadline = time.monotonic() + wait
    while requests and time.monotonic() < deadline:
        for worker_id, request in list(requests.items()):
            state = sdk.request_status(request)
            if state not in sdk.REQUEST_DONE and state != "MISSING":
                continue
            outcome = sdk.down_outcome(request)
            _set_meta(db, worker_id, teardown=outcome, torn_down_at=now())
            del requests[worker_id]
        if requests:
            time.sleep(1.0)
    return store.rows_of(db, worker_ids)


def cluster_statuses(names: Sequence[str]) -> dict[str, str]:
    """SkyPilot's own status of these clusters (refreshed from the infra); missing ones are absent."""
    if not names:
        return {}
    return {str(r["name"]): sdk.status_value(r["status"]) for r in sdk.clusters(names, refresh=True)}


def _set_meta(db: sqlite_utils.Database, worker_id: int, **changes: Any) -> None:
    row = store.row(db, worker_id)
    meta = _meta(row["meta"] if row else None)
    meta.update(changes)
    store.update(db, worker_id, {"meta": meta})
