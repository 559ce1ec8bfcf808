"""File-level mode: a fork's version of each file of the paths of interest against the baseline's.

For forks with no usable fork point (the closest pair of commits is far; a single-commit target and a
fork that left upstream long ago), commits cannot be told apart as the fork's own work, so the
evidence is the files themselves: one `fork_file` evidence row per file that differs (modified,
added in the fork, deleted in the fork), with its diff from the baseline's version to the fork's,
capped like commit diffs, in one batched `git diff --raw --numstat -p`.

Recording again at a new fork head updates rows in place (ids kept, so citing hypotheses stay
valid); files that no longer differ are deleted, or kept marked stale when something cites them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb import gitrepo
from kb.commit_facts import area_of
from kb.db import insert, is_cited, now, one, rows, update
from kb.forklog import NUMSTAT, DiffCapper, DiffText, changed_lines, raw_entry
from kb.jsoncol import decoded_dict

if TYPE_CHECKING:
    import git

    from kb.inventory.layout import BackendMap, HistoryBackends

_STATUS = {"M": "modified", "T": "modified", "A": "added", "D": "deleted"}


@dataclass
class ForkFile(DiffText):
    path: str = ""
    status: str = "modified"
    """modified, added (only in the fork) or deleted (only in the baseline)."""
    fork_blob: str | None = None
    baseline_blob: str | None = None
    insertions: int = 0
    deletions: int = 0
    binary: bool = False
    backend: str | None = None


def compare_files(
    repo: git.Repo,
    baseline: str,
    head: str,
    paths: list[str],
    *,
    per_file: int,
    max_files: int,
    backends: BackendMap | HistoryBackends | None,
) -> tuple[list[ForkFile], int]:
    """(the differing files, at most `max_files`, and how many differ in all) under `paths`.

    A folder of the paths of interest the fork has nothing in (another layout) does not make its
    files "deleted by the fork": they are only absent, and left out."""
    present = gitrepo.list_files(repo, head, paths) if paths else []
    absent = [p for p in paths if not any(_under(f, p) for f in present)]
    lines = gitrepo.stream(
        repo,
        "-c",
        "core.quotePath=false",
        "diff",
        "--no-renames",
        "--no-color",
        "--no-ext-diff",
        "--raw",
        "--no-abbrev",
        "--numstat",
        "-p",
        baseline,
        head,
        "--",
        *paths,
    )
    # Raw lines, numstat lines and diffs come in the same order of files: entry k is the k-th of each.
    entries: list[ForkFile | None] = []
    files: list[ForkFile] = []
    absent_files = 0
    stats = 0
    section = -1
    capper: DiffCapper | None = None
    for line in lines:
        if line.startswith(b"diff --git "):
            section += 1
            entry = entries[section] if section < len(entries) else None
            capper = DiffCapper(entry, per_file, per_file) if entry is not None else None
        if section >= 0:
            if capper is not None:
                capper.add(line)
            continue
        raw = raw_entry(line)
        if raw is not None:
            path, old, new, letter = raw
            status = _STATUS.get(letter, "modified")
            item: ForkFile | None = None
            if status == "deleted" and any(_under(path, p) for p in absent):
                absent_files += 1
            elif len(files) < max_files:
                backend = backends.backend_of(path) if backends is not None else None
                item = ForkFile(path=path, status=status, fork_blob=new, baseline_blob=old, backend=backend)
                files.append(item)
            entries.append(item)
            continue
        match = NUMSTAT.match(line.rstrip(b"\n"))
        if match:
            stat = entries[stats] if stats < len(entries) else None
            if stat is not None:
                if match.group(1) == b"-":
                    stat.binary = True
                else:
                    stat.insertions, stat.deletions = int(match.group(1)), int(match.group(2))
            stats += 1
    differing = len(entries) - absent_files
    return files, differing


def _under(path: str, entry: str) -> bool:
    entry = entry.rstrip("/")
    return path == entry or path.startswith(entry + "/")


def _body(item: ForkFile, fork: str, head: str, baseline: str) -> str:
    where = f" ({item.backend} backend)" if item.backend else ""
    summary = {
        "modified": f"the fork's version differs from the baseline's: +{item.insertions} -{item.deletions}",
        "added": f"only in the fork ({item.insertions} lines)",
        "deleted": "only in the baseline: the fork removed it",
    }[item.status]
    parts = [
        f"{item.path}{where}: {summary}" + (" (binary)" if item.binary else ""),
        f"Fork {fork} at {head[:12]} against the baseline {baseline[:12]}, file by file",
        changed_lines(item.diff),
    ]
    return "\n\n".join(p for p in parts if p)


def store_files(
    db: sqlite_utils.Database,
    source_id: int,
    fork: str,
    head: str,
    baseline: str,
    files: list[ForkFile],
) -> None:
    """Write the comparison as `fork_file` evidence (inside the caller's transaction)."""
    found = rows(db, "SELECT id, ref FROM evidence WHERE source_id = ? AND kind = 'fork_file'", [source_id])
    existing = {r["ref"]: int(r["id"]) for r in found}
    wanted: set[str] = set()
    for item in files:
        wanted.add(item.path)
        meta: dict[str, Any] = {
            "fork": fork,
            "path": item.path,
            "status": item.status,
            "backend": item.backend,
            "area": area_of(item.path, item.backend),
            "insertions": item.insertions,
            "deletions": item.deletions,
            "fork_commit": head,
            "baseline": baseline,
        }
        if item.diff_truncated:
            meta["diff_truncated"] = True
        row = {
            "title": f"{item.path} in fork {fork}",
            "section": fork,
            "body": _body(item, fork, head, baseline),
            "meta": meta,
        }
        evidence_id = existing.get(item.path)
        if evidence_id is None:
            new = {**row, "source_id": source_id, "kind": "fork_file", "ref": item.path, "created_at": now()}
            evidence_id = insert(db, "evidence", new)
        else:
            update(db, "evidence", evidence_id, row)
            db.execute("DELETE FROM fork_files WHERE evidence_id = ?", [evidence_id])
        insert(
            db,
            "fork_files",
            {
                "evidence_id": evidence_id,
                "path": item.path,
                "status": item.status,
                "fork_commit": head,
                "baseline_commit": baseline,
                "fork_blob": item.fork_blob,
                "baseline_blob": item.baseline_blob,
                "insertions": item.insertions,
                "deletions": item.deletions,
                "binary": int(item.binary),
                "backend": item.backend,
                "diff": item.diff,
                "diff_truncated": int(item.diff_truncated),
            },
        )
    for path, evidence_id in existing.items():
        if path in wanted:
            continue
        if is_cited(db, evidence_id):
            old = one(db, "SELECT meta FROM evidence WHERE id = ?", [evidence_id])
            meta = decoded_dict(old["meta"] if old else None)
            update(db, "evidence", evidence_id, {"meta": {**meta, "stale": True}})
            db.execute("DELETE FROM fork_files WHERE evidence_id = ?", [evidence_id])
        else:
            db.execute("DELETE FROM evidence WHERE id = ?", [evidence_id])
