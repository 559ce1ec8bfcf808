"""The upstream's pull requests (`kb add-prs`, kb/prs.py writes them; the pull-request miner and
`kb prs` read them): one row each, beside the fork source that holds its commits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.paging import shaped, shaped_one
from kb.store.tables import PullRequestRow

if TYPE_CHECKING:
    import sqlite_utils

MINED_STATES = ("open", "unknown", "merged")
"""States whose pull requests are mined when their change is not in the baseline (a pull request
merged upstream after the baseline is a change the baseline lacks)."""


def by_number(db: sqlite_utils.Database, remote: str, number: int) -> PullRequestRow | None:
    return shaped_one(
        db, PullRequestRow, "SELECT * FROM pull_requests WHERE remote = ? AND number = ?", [remote, number]
    )


def save(db: sqlite_utils.Database, values: dict[str, Any]) -> int:
    """Insert or update (by remote and number) a pull request; its id."""
    from kb.db import insert, update

    found = by_number(db, str(values["remote"]), int(values["number"]))
    if found is None:
        return insert(db, "pull_requests", {**values, "created_at": values["updated_at"]})
    update(db, "pull_requests", found["id"], values)
    return found["id"]


def mark_commits_upstream(db: sqlite_utils.Database, source_id: int) -> None:
    """Every commit of a pull request whose change is in the baseline counts as upstream."""
    db.execute(
        "UPDATE commits SET upstreamed = 1 WHERE evidence_id IN "
        "(SELECT id FROM evidence WHERE source_id = ? AND kind = 'commit')",
        [source_id],
    )


class PullRequestListing(TypedDict):
    """A pull request as `kb prs` lists it: its row's facts, its commit count, its hypothesis."""

    id: int
    remote: str
    number: int
    state: str
    upstream: int
    upstream_reason: str | None
    title: str
    url: str | None
    described_by: str
    head_sha: str
    commits: int
    hypothesis: int | None


def listing(db: sqlite_utils.Database) -> list[PullRequestListing]:
    """Every pull request, newest number first per remote, with its commits and hypothesis."""
    return shaped(
        db,
        PullRequestListing,
        """
SELECT p.id, p.remote, p.number, p.state, p.upstream, p.upstream_reason, p.title, p.url,
       p.described_by, p.head_sha,
       (SELECT count(*) FROM evidence e WHERE e.source_id = p.source_id AND e.kind = 'commit') AS commits,
       (SELECT h.id FROM hypotheses h
        WHERE h.dedupe_key = 'pr:' || p.remote || '#' || p.number || '@' || p.head_sha) AS hypothesis
FROM pull_requests p ORDER BY p.remote, p.number DESC
""",
    )


def minable(db: sqlite_utils.Database) -> list[PullRequestRow]:
    """Pull requests whose change the baseline lacks, in a state worth mining, oldest number first."""
    marks = ", ".join("?" for _ in MINED_STATES)
    return shaped(
        db,
        PullRequestRow,
        f"SELECT * FROM pull_requests WHERE upstream = 0 AND state IN ({marks}) ORDER BY remote, number",
        list(MINED_STATES),
    )


class PullRequestCommit(TypedDict):
    """A pull request's commit as its hypothesis cites it."""

    evidence_id: int
    sha: str
    upstreamed: int


def commits_of(db: sqlite_utils.Database, source_id: int) -> list[PullRequestCommit]:
    return shaped(
        db,
        PullRequestCommit,
        "SELECT e.id AS evidence_id, c.sha, c.upstreamed FROM evidence e JOIN commits c "
        "ON c.evidence_id = e.id WHERE e.source_id = ? AND e.kind = 'commit' ORDER BY e.id",
        [source_id],
    )
