"""Listing forks and their commits (`kb forks`, `kb commits`): typed rows out of the database."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from kb.db import one, rows
from kb.errors import UserError
from kb.jsoncol import decoded_dict, decoded_list


@dataclass(frozen=True)
class Fork:
    id: int
    name: str
    url: str
    branch: str
    head: str
    merge_base: str
    commits: int
    upstreamed: int
    updated_at: float
    fork_point: dict[str, Any] = field(default_factory=dict)
    files: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ForkCommit:
    evidence_id: int
    sha: str
    subject: str
    author: str | None
    date: str | None
    files: list[str]
    insertions: int
    deletions: int
    upstreamed: bool
    diff_truncated: bool
    backends: list[str] = field(default_factory=list)
    areas: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_forks(db: sqlite_utils.Database, name: str | None = None) -> list[Fork]:
    where, params = ("AND s.name = ?", [name]) if name else ("", [])
    found = rows(
        db,
        f"SELECT s.id, s.name, s.url, s.ref AS branch, s.commit_sha AS head, s.merge_base, s.updated_at, "
        f"s.meta, count(c.evidence_id) AS commits, coalesce(sum(c.upstreamed), 0) AS upstreamed, "
        f"(SELECT count(*) FROM evidence f WHERE f.source_id = s.id AND f.kind = 'fork_file') AS files "
        f"FROM sources s LEFT JOIN evidence e ON e.source_id = s.id AND e.kind = 'commit' "
        f"LEFT JOIN commits c ON c.evidence_id = e.id WHERE s.kind = 'fork' {where} "
        f"GROUP BY s.id ORDER BY s.name",
        params,
    )
    if name and not found:
        raise UserError(f"{name}: no such fork")
    forks: list[Fork] = []
    for row in found:
        meta = decoded_dict(row.pop("meta"))
        row["merge_base"] = row["merge_base"] or ""
        forks.append(Fork(**row, fork_point=meta.get("fork_point", {})))
    return forks


def list_commits(db: sqlite_utils.Database, name: str, path: str | None = None) -> list[ForkCommit]:
    """A fork's commits, oldest first; with `path`, only those touching that file or folder."""
    fork = one(db, "SELECT id FROM sources WHERE kind = 'fork' AND name = ?", [name])
    if fork is None:
        raise UserError(f"{name}: no such fork")
    where = ""
    params: list[Any] = [fork["id"]]
    if path:
        prefix = path.strip().removeprefix("./").rstrip("/")
        if prefix:
            where = (
                "AND EXISTS (SELECT 1 FROM commit_files f WHERE f.evidence_id = e.id "
                "AND (f.path = ? OR substr(f.path, 1, ?) = ?))"
            )
            params += [prefix, len(prefix) + 1, prefix + "/"]
    found = rows(
        db,
        f"SELECT e.id AS evidence_id, c.sha, c.subject, c.author, c.authored_at AS date, c.files, "
        f"c.insertions, c.deletions, c.upstreamed, c.diff_truncated, c.backends, c.areas, c.claims "
        f"FROM evidence e JOIN commits c ON c.evidence_id = e.id "
        f"WHERE e.source_id = ? AND e.kind = 'commit' {where} ORDER BY e.id",
        params,
    )
    return [
        ForkCommit(
            evidence_id=r["evidence_id"],
            sha=r["sha"],
            subject=r["subject"],
            author=r["author"],
            date=r["date"],
            files=decoded_list(r["files"]),
            insertions=r["insertions"],
            deletions=r["deletions"],
            upstreamed=bool(r["upstreamed"]),
            diff_truncated=bool(r["diff_truncated"]),
            backends=decoded_list(r["backends"]),
            areas=decoded_list(r["areas"]),
            claims=decoded_list(r["claims"]),
        )
        for r in found
    ]
