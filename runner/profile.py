"""The baseline's profile: the functions the benchmark spends its time in, when it says so.

`autoresearch.sh` may print `PROFILE <symbol>=<share>` lines next to its METRIC lines (a share is a
fraction of the call's time, e.g. from `perf report`; runner/protocol.py reads them). `autoresearch
validate` runs the benchmark on the baseline, so its calls' profile is recorded with the baseline
commit (`baseline_profiles`): the median share of each symbol over the calls that printed it. The
ranker (runner/rank.py) reads it to rank the hypotheses that touch the hot functions higher.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

import sqlite_utils

from kb.db import now, transaction
from kb.store import profiles as store


def shares(calls: Iterable[Mapping[str, float]]) -> dict[str, tuple[float, int]]:
    """{symbol: (median share, calls that printed it)} over the profiles of several calls."""
    seen: dict[str, list[float]] = {}
    for profile in calls:
        for symbol, share in profile.items():
            seen.setdefault(symbol, []).append(share)
    return {s: (round(statistics.median(v), 6), len(v)) for s, v in seen.items()}


def record(
    db: sqlite_utils.Database, baseline: str, found: Mapping[str, tuple[float, int]], source: str
) -> int:
    """Replace the baseline's profile with `found` (a profile is a whole: symbols no longer printed
    leave it); returns how many symbols were stored. An empty `found` keeps the stored profile."""
    if not found:
        return 0
    stamp = now()
    with transaction(db):
        store.replace(db, baseline, found, source, stamp)
    return len(found)


def load(db: sqlite_utils.Database, baseline: str) -> dict[str, float]:
    """{symbol: share} recorded for a baseline commit ({} when its benchmark prints no profile)."""
    return store.shares(db, baseline)
