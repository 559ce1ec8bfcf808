"""Forks of the target: fetch a fork into the workspace mirror and record its fork-only commits.

    result = add_fork(ws, db, "ik", "https://github.com/ikawrakow/ik_llama.cpp", branch="main")

The fork's branch is fetched into the mirror as `refs/forks/<name>/<branch>`. Its commits that the
target's baseline does not contain (non-merge commits of `baseline..fork`) become evidence of kind
`commit`, each with a `commits` row (sha, author, date, subject, message, insertions/deletions, the
diff capped per file and per commit, binary files noted, patch-id, upstreamed) and one
`commit_files` row per path. `upstreamed` means `git cherry` found the same patch-id in the baseline
since the fork point. Re-running reads only commits not yet recorded.

Mining is batched: one `git log --numstat -p` process parsed as a stream, one `git patch-id` and
one `git cherry` pass, whatever the number of commits.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import sqlite_utils

from kb import gitrepo
from kb.config import KBSettings
from kb.db import insert, log_event, now, one, rows, transaction, update
from kb.errors import UserError

if TYPE_CHECKING:
    import git

    from kb.workspace import Workspace

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NUMSTAT = re.compile(rb"^(\d+|-)\t(\d+|-)\t(.*)$")
_HEADER_FIELDS = 7  # sha, author, email, date, subject, body, and the empty rest after the last \x1f
_LOG_FORMAT = "%x1e%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1f%b%x1f"
BODY_DIFF_CHARS = 6000
"""How much of the changed lines goes into the evidence body, so identifiers in code are searchable."""


@dataclass
class MinedCommit:
    sha: str
    author: str
    email: str
    date: str
    subject: str
    body: str
    files: list[str] = field(default_factory=list)
    insertions: int = 0
    deletions: int = 0
    binary_files: list[str] = field(default_factory=list)
    truncated_files: list[str] = field(default_factory=list)
    diff_truncated: bool = False
    diff_parts: list[bytes] = field(default_factory=list)
    diff_bytes: int = 0

    @property
    def diff(self) -> str:
        return b"".join(self.diff_parts).decode("utf-8", "replace")

    @property
    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".strip() + "\n" if self.body else self.subject + "\n"


@dataclass(frozen=True)
class ForkResult:
    name: str
    status: Literal["added", "refreshed", "unchanged"]
    message: str
    source_id: int
    head: str
    merge_base: str
    new_commits: int
    commits: int
    upstreamed: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- parsing one batched `git log --numstat -p` ----------------------------------------------------


def _unquote_path(raw: bytes) -> str:
    """numstat paths with special characters come C-quoted ("a\\tb"); the rest are verbatim."""
    if raw.startswith(b'"') and raw.endswith(b'"'):
        raw = codecs.escape_decode(raw[1:-1])[0]
    return raw.decode("utf-8", "replace")


class _DiffCapper:
    """Keeps a commit's diff within the caps while it streams; notes what was cut and why."""

    def __init__(self, commit: MinedCommit, per_file: int, per_commit: int) -> None:
        self.commit = commit
        self.per_file = per_file
        self.per_commit = per_commit
        self.file_bytes = 0
        self.file_path = ""
        self.file_cut = False

    def add(self, line: bytes) -> None:
        commit = self.commit
        if line.startswith(b"diff --git "):
            self.file_bytes = 0
            self.file_cut = False
            self.file_path = line.rstrip(b"\n").split(b" b/", 1)[-1].decode("utf-8", "replace")
        if commit.diff_truncated and commit.diff_bytes >= self.per_commit:
            return
        if self.file_cut:
            return
        if self.file_bytes + len(line) > self.per_file:
            self.file_cut = True
            commit.diff_truncated = True
            commit.truncated_files.append(self.file_path)
            self._note(f"... [diff of {self.file_path} cut at {self.per_file:,} bytes]\n")
            return
        if commit.diff_bytes + len(line) > self.per_commit:
            commit.diff_truncated = True
            self._note(f"... [diff cut at {self.per_commit:,} bytes; later files left out]\n")
            commit.diff_bytes = self.per_commit
            return
        commit.diff_parts.append(line)
        commit.diff_bytes += len(line)
        self.file_bytes += len(line)

    def _note(self, text: str) -> None:
        self.commit.diff_parts.append(text.encode())


def parse_log(
    lines: Iterable[bytes], *, per_file: int, per_commit: int, patches: IO[bytes] | None = None
) -> Iterator[MinedCommit]:
    """Commits from `git log --format=<_LOG_FORMAT> --numstat -p`, streamed.

    With `patches`, each commit's full (uncapped) diff is also written there under a `commit <sha>`
    line, the input `git patch-id` expects."""
    commit: MinedCommit | None = None
    capper: _DiffCapper | None = None
    header: bytes | None = None
    in_diff = False
    for line in lines:
        if line.startswith(b"\x1e"):
            if commit is not None:
                yield commit
            commit, capper, in_diff = None, None, False
            header = line[1:]
        elif header is not None:
            header += line
        if header is not None:
            if header.count(b"\x1f") < _HEADER_FIELDS - 1:
                continue
            sha, author, email, date, subject, body, _ = (
                part.decode("utf-8", "replace") for part in header.split(b"\x1f", _HEADER_FIELDS - 1)
            )
            commit = MinedCommit(
                sha=sha, author=author, email=email, date=date, subject=subject, body=body.strip()
            )
            capper = _DiffCapper(commit, per_file, per_commit)
            header = None
            if patches is not None:
                patches.write(b"commit " + sha.encode() + b"\n")
            continue
        if commit is None or capper is None:
            continue
        if in_diff or line.startswith(b"diff --git "):
            in_diff = True
            capper.add(line)
            if patches is not None:
                patches.write(line)
            continue
        match = _NUMSTAT.match(line.rstrip(b"\n"))
        if match:
            path = _unquote_path(match.group(3))
            commit.files.append(path)
            if match.group(1) == b"-":
                commit.binary_files.append(path)
            else:
                commit.insertions += int(match.group(1))
                commit.deletions += int(match.group(2))
    if commit is not None:
        yield commit


def evidence_body(commit: MinedCommit, fork: str) -> str:
    """What search sees of a commit: its message, the files it touches, and its changed lines."""
    files = "\n".join(f"{path} (binary)" if path in commit.binary_files else path for path in commit.files)
    changed: list[str] = []
    size = 0
    for line in commit.diff.splitlines():
        if line.startswith("diff --git "):
            text = "== " + line.split(" b/", 1)[-1]
        elif line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        else:
            text = line
        size += len(text) + 1
        if size > BODY_DIFF_CHARS:
            changed.append("…")
            break
        changed.append(text)
    parts = [
        commit.subject,
        commit.body,
        f"Fork {fork}, commit {commit.sha[:12]} by {commit.author}",
        f"Files:\n{files}" if files else "",
        "\n".join(changed),
    ]
    return "\n\n".join(p for p in parts if p)


# --- fetching and recording -----------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not _NAME.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise UserError(f"{name}: invalid fork name (letters, digits, '.', '_', '-'; up to 64 characters)")


def _location(location: str) -> str:
    if gitrepo.is_url(location):
        return location
    path = Path(location).expanduser().resolve()
    gitrepo.open_repo(path)  # "no such folder" / "not a git repository"
    return str(path)


def _baseline(ws: Workspace, repo: git.Repo) -> str:
    target = ws.settings.target
    return target.baseline_commit or gitrepo.resolve(repo, target.baseline)


def add_fork(
    ws: Workspace,
    db: sqlite_utils.Database,
    name: str,
    location: str | None = None,
    *,
    branch: str | None = None,
) -> ForkResult:
    """Add a fork or refresh it (new commits only). Bad input raises UserError; nothing is written
    to the database or left in the mirror then."""
    started = time.perf_counter()
    _check_name(name)
    existing = one(db, "SELECT * FROM sources WHERE kind = 'fork' AND name = ?", [name])
    if location is None:
        if existing is None:
            raise UserError(f"{name}: no such fork (give its URL or path to add it)")
        location = str(existing["url"])
    else:
        location = _location(location)
    if existing is not None:
        if existing["url"] != location:
            raise UserError(
                f"{name}: already a fork of {existing['url']}; choose another name for {location}"
            )
        if branch is not None and branch != existing["ref"]:
            raise UserError(
                f"{name}: already follows branch {existing['ref']}; choose another name for branch {branch}"
            )
        branch = str(existing["ref"])
    repo = gitrepo.open_repo(ws.mirror_path)
    default, heads = gitrepo.ls_remote(repo, location)
    if branch is None:
        if default is None:
            raise UserError(f"{location}: its HEAD is not a branch; pass --branch")
        branch = default
    if branch not in heads:
        listed = ", ".join(sorted(heads)[:10]) or "none"
        raise UserError(f"{location}: unknown branch {branch!r} (branches: {listed})")
    if existing is None:
        same = one(
            db, "SELECT name FROM sources WHERE kind = 'fork' AND url = ? AND ref = ?", [location, branch]
        )
        if same:
            raise UserError(f"{location} branch {branch}: already recorded as fork {same['name']}")
    baseline = _baseline(ws, repo)
    final_ref = f"refs/forks/{name}/{branch}"
    temp_ref = f"refs/autoresearch-tmp/{name}-{os.getpid()}"
    try:
        head = gitrepo.fetch_branch(repo, location, branch, temp_ref)
        base = gitrepo.merge_base(repo, baseline, head)
        if base is None:
            raise UserError(
                f"{location}: branch {branch} has no history in common with the target "
                f"baseline {baseline[:12]}"
            )
        known = (
            {
                r["ref"]
                for r in rows(
                    db, "SELECT ref FROM evidence WHERE source_id = ? AND kind = 'commit'", [existing["id"]]
                )
            }
            if existing
            else set()
        )
        old_head = existing["commit_sha"] if existing else None
        if existing is not None and old_head == head:
            result = _unchanged(db, existing, head, base, started)
        else:
            result = _record(
                ws.settings.kb,
                repo,
                db,
                name,
                location,
                branch,
                head,
                base,
                baseline,
                existing,
                known,
                old_head,
                started,
            )
        gitrepo.update_ref(repo, final_ref, head)
    finally:
        gitrepo.delete_ref(repo, temp_ref)
    return result


def _counts(db: sqlite_utils.Database, source_id: int) -> tuple[int, int]:
    row = one(
        db,
        "SELECT count(*) AS n, coalesce(sum(c.upstreamed), 0) AS up FROM evidence e "
        "JOIN commits c ON c.evidence_id = e.id WHERE e.source_id = ?",
        [source_id],
    )
    assert row is not None
    return int(row["n"]), int(row["up"])


def _unchanged(
    db: sqlite_utils.Database, existing: dict[str, Any], head: str, base: str, started: float
) -> ForkResult:
    total, upstreamed = _counts(db, existing["id"])
    return ForkResult(
        existing["name"],
        "unchanged",
        f"fork {existing['name']}: up to date at {head[:12]} ({total} commits, none new)",
        existing["id"],
        head,
        base,
        0,
        total,
        upstreamed,
        time.perf_counter() - started,
    )


def _record(
    settings: KBSettings,
    repo: git.Repo,
    db: sqlite_utils.Database,
    name: str,
    location: str,
    branch: str,
    head: str,
    base: str,
    baseline: str,
    existing: dict[str, Any] | None,
    known: set[str],
    old_head: str | None,
    started: float,
) -> ForkResult:
    exclude = [f"^{baseline}"]
    if old_head and gitrepo.has_commit(repo, old_head) and gitrepo.is_ancestor(repo, old_head, head):
        exclude.append(f"^{old_head}")  # fast path: only what is new since the last refresh
    with tempfile.NamedTemporaryFile(prefix="autoresearch-patches-", suffix=".diff", delete=False) as patches:
        try:
            lines = gitrepo.stream(
                repo,
                "-c",
                "core.quotePath=false",
                "log",
                "--no-merges",
                "--no-renames",
                "--no-color",
                "--reverse",
                f"--format={_LOG_FORMAT}",
                "--numstat",
                "-p",
                "--no-ext-diff",
                head,
                *exclude,
            )
            mined = [
                c
                for c in parse_log(
                    lines,
                    per_file=settings.max_file_diff_bytes,
                    per_commit=settings.max_commit_diff_bytes,
                    patches=patches,
                )
                if c.sha not in known
            ]
            patches.close()
            ids = gitrepo.patch_ids(repo, Path(patches.name)) if mined else {}
        finally:
            patches.close()
            os.unlink(patches.name)
    upstream = gitrepo.cherry(repo, baseline, head) if mined or existing is None else {}
    created = now()
    with transaction(db):
        meta = {"baseline": baseline, "location": location}
        if existing is None:
            source_id = insert(
                db,
                "sources",
                {
                    "kind": "fork",
                    "name": name,
                    "url": location,
                    "ref": branch,
                    "commit_sha": head,
                    "merge_base": base,
                    "title": f"fork {name} ({branch})",
                    "meta": meta,
                    "created_at": created,
                    "updated_at": created,
                },
            )
        else:
            source_id = int(existing["id"])
            update(
                db,
                "sources",
                source_id,
                {"commit_sha": head, "merge_base": base, "meta": meta, "updated_at": created},
            )
        for commit in mined:
            _insert_commit(db, source_id, name, commit, ids.get(commit.sha), upstream.get(commit.sha, False))
        if existing is not None and upstream:
            # The baseline may have moved since the last refresh: keep `upstreamed` current for all.
            current = db.execute(
                "SELECT c.evidence_id, c.sha, c.upstreamed FROM commits c JOIN evidence e "
                "ON e.id = c.evidence_id WHERE e.source_id = ? AND e.kind = 'commit'",
                [source_id],
            ).fetchall()
            changed = [
                (int(upstream[sha]), evidence_id)
                for evidence_id, sha, flag in current
                if sha in upstream and bool(flag) != upstream[sha]
            ]
            db.conn.executemany("UPDATE commits SET upstreamed = ? WHERE evidence_id = ?", changed)
        total, upstreamed = _counts(db, source_id)
        status: Literal["added", "refreshed"] = "added" if existing is None else "refreshed"
        message = (
            f"fork {name}: {status} {len(mined)} new commit{'s' if len(mined) != 1 else ''} "
            f"({total} fork-only, {upstreamed} already upstream) at {head[:12]}, "
            f"merge base {base[:12]}"
        )
        binary = sum(bool(c.binary_files) for c in mined)
        truncated = sum(c.diff_truncated for c in mined)
        if binary or truncated:
            message += f"; {binary} with binary files, {truncated} with diffs cut at the size caps"
        log_event(db, "kb.fork", message, data={"source_id": source_id, "head": head, "new": len(mined)})
    return ForkResult(
        name,
        status,
        message,
        source_id,
        head,
        base,
        len(mined),
        total,
        upstreamed,
        time.perf_counter() - started,
    )


def _insert_commit(
    db: sqlite_utils.Database,
    source_id: int,
    fork: str,
    commit: MinedCommit,
    patch_id: str | None,
    upstreamed: bool,
) -> None:
    meta: dict[str, Any] = {
        "fork": fork,
        "author": commit.author,
        "date": commit.date,
        "upstreamed": upstreamed,
    }
    if commit.binary_files:
        meta["binary_files"] = commit.binary_files
    if commit.truncated_files or commit.diff_truncated:
        meta["diff_truncated"] = True
        meta["truncated_files"] = commit.truncated_files
    evidence_id = insert(
        db,
        "evidence",
        {
            "source_id": source_id,
            "kind": "commit",
            "ref": commit.sha,
            "title": commit.subject,
            "section": fork,
            "body": evidence_body(commit, fork),
            "meta": meta,
            "created_at": now(),
        },
    )
    insert(
        db,
        "commits",
        {
            "evidence_id": evidence_id,
            "sha": commit.sha,
            "author": f"{commit.author} <{commit.email}>",
            "authored_at": commit.date,
            "subject": commit.subject,
            "message": commit.message,
            "files": commit.files,
            "insertions": commit.insertions,
            "deletions": commit.deletions,
            "diff": commit.diff,
            "diff_truncated": int(commit.diff_truncated),
            "binary_files": commit.binary_files or None,
            "patch_id": patch_id,
            "upstreamed": int(upstreamed),
        },
    )
    db.conn.executemany(
        "INSERT OR IGNORE INTO commit_files (evidence_id, path) VALUES (?, ?)",
        [(evidence_id, path) for path in commit.files],
    )


# --- listing --------------------------------------------------------------------------------------


def list_forks(db: sqlite_utils.Database, name: str | None = None) -> list[Fork]:
    where, params = ("AND s.name = ?", [name]) if name else ("", [])
    found = rows(
        db,
        f"SELECT s.id, s.name, s.url, s.ref AS branch, s.commit_sha AS head, s.merge_base, s.updated_at, "
        f"count(c.evidence_id) AS commits, coalesce(sum(c.upstreamed), 0) AS upstreamed "
        f"FROM sources s LEFT JOIN evidence e ON e.source_id = s.id AND e.kind = 'commit' "
        f"LEFT JOIN commits c ON c.evidence_id = e.id WHERE s.kind = 'fork' {where} "
        f"GROUP BY s.id ORDER BY s.name",
        params,
    )
    if name and not found:
        raise UserError(f"{name}: no such fork")
    return [Fork(**row) for row in found]


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
        f"c.insertions, c.deletions, c.upstreamed, c.diff_truncated FROM evidence e "
        f"JOIN commits c ON c.evidence_id = e.id WHERE e.source_id = ? AND e.kind = 'commit' {where} "
        f"ORDER BY e.id",
        params,
    )
    return [
        ForkCommit(
            evidence_id=r["evidence_id"],
            sha=r["sha"],
            subject=r["subject"],
            author=r["author"],
            date=r["date"],
            files=json.loads(r["files"]),
            insertions=r["insertions"],
            deletions=r["deletions"],
            upstreamed=bool(r["upstreamed"]),
            diff_truncated=bool(r["diff_truncated"]),
        )
        for r in found
    ]
