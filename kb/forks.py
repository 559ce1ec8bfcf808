"""Forks of the target: fetch a fork into the workspace mirror and record its fork-only commits.

    result = add_fork(ws, db, "ik", "https://github.com/ikawrakow/ik_llama.cpp", branch="main")

The fork's branch is fetched into the mirror as `refs/forks/<name>/<branch>`. Where it left the
target is found by kb/forkpoint.py: the merge base, or by content when the histories share no commit
(the newest pair of identical trees, else the closest pair under the paths of interest), or a fork
point given by the user or the recipe; how it was found is kept on the fork's source row
(`meta.fork_point`). Its commits after that point (non-merge) become evidence of kind `commit`,
each with a `commits` row (sha, author, date, subject, message, insertions/deletions, the diff capped
per file and per commit, binary files noted, patch-id, upstreamed, and what the queue ranks by: the
compute backends and areas its files belong to and the speed-ups its message claims) and one
`commit_files` row per path. `upstreamed` means an upstream commit since the fork point has the same
patch-id (`git cherry`'s rule, applied by content when the histories are unrelated). When even the
closest pair is far, file-level mode records the fork's files against the baseline's instead
(kb/forkfiles.py). Re-running reads only commits not yet recorded.

Mining is batched: one `git log --raw --numstat -p` process parsed as a stream, one `git patch-id`
pass per side, whatever the number of commits.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import sqlite_utils

from kb import gitrepo
from kb.commit_facts import CommitFacts, commit_facts
from kb.config import ForkSuggestion, KBSettings
from kb.db import insert, log_event, now, one, rows, transaction, update
from kb.errors import UserError
from kb.forkfiles import ForkFile, compare_files, store_files
from kb.forklist import Fork, ForkCommit, list_commits, list_forks
from kb.forklock import fork_lock
from kb.forklog import LOG_FORMAT, MinedCommit, evidence_body, parse_log
from kb.forkpoint import ForkPoint, find_fork_point
from kb.jsoncol import decoded_dict, decoded_list

if TYPE_CHECKING:
    import git

    from kb.inventory.layout import HistoryBackends
    from kb.workspace import Workspace

__all__ = [
    "Fork",
    "ForkCommit",
    "ForkResult",
    "MinedCommit",
    "add_fork",
    "list_commits",
    "list_forks",
    "parse_log",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class ForkResult:
    name: str
    status: Literal["added", "refreshed", "unchanged"]
    message: str
    source_id: int
    head: str
    merge_base: str
    """The target's commit at the fork point (the merge base, or the commit found by content)."""
    new_commits: int
    commits: int
    upstreamed: int
    seconds: float
    fork_point: dict[str, Any] = field(default_factory=dict)
    """How the fork point was found (method, commits, files differing of those compared)."""
    files: int = 0
    """Files recorded in file-level mode (the fork's version against the baseline's)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def _suggestion(ws: Workspace, name: str) -> ForkSuggestion | None:
    """The `[reading]` fork of this name, if the config (a recipe) suggests one."""
    return next((f for f in ws.settings.reading.forks if f.name == name), None)


@dataclass
class _Request:
    """What add_fork was asked, completed from the stored fork and the config's suggestion."""

    name: str
    location: str
    branch: str | None
    given: str | None
    existing: dict[str, Any] | None
    meta: dict[str, Any]
    suggested_point: bool = False
    """The fork point comes from the config's suggestion: ignored (said so) if the fork lacks it."""


def _request(
    ws: Workspace,
    db: sqlite_utils.Database,
    name: str,
    location: str | None,
    branch: str | None,
    fork_point: str | None,
) -> _Request:
    _check_name(name)
    existing = one(db, "SELECT * FROM sources WHERE kind = 'fork' AND name = ?", [name])
    meta: dict[str, Any] = decoded_dict(existing["meta"] if existing else None)
    suggested = _suggestion(ws, name)
    if location is None:
        if existing is not None:
            location = str(existing["url"])
        elif suggested is not None:
            location = suggested.url
        else:
            raise UserError(f"{name}: no such fork (give its URL or path to add it)")
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
    elif branch is None and suggested is not None and suggested.branch:
        branch = suggested.branch
    given = fork_point or meta.get("fork_point_given") or ""
    from_config = not given and suggested is not None and bool(suggested.fork_point)
    if from_config and suggested is not None:
        given = suggested.fork_point
    return _Request(name, location, branch, given or None, existing, meta, from_config)


def add_fork(
    ws: Workspace,
    db: sqlite_utils.Database,
    name: str,
    location: str | None = None,
    *,
    branch: str | None = None,
    fork_point: str | None = None,
) -> ForkResult:
    """Add a fork or refresh it (new commits only). Bad input raises UserError; nothing is written
    to the database or left in the mirror then.

    `location` may be left out for a fork already recorded, or one the config's `[reading]` forks
    suggest (its URL, branch and fork point are used). `fork_point` names the fork's commit where it
    left the target, for a target with no history to find it by; it is remembered for refreshes.
    One process at a time per workspace (kb/forklock.py): a second one waits, then refreshes."""
    with fork_lock(ws.root):
        return _add_fork_locked(ws, db, name, location, branch=branch, fork_point=fork_point)


def _add_fork_locked(
    ws: Workspace,
    db: sqlite_utils.Database,
    name: str,
    location: str | None = None,
    *,
    branch: str | None = None,
    fork_point: str | None = None,
) -> ForkResult:
    started = time.perf_counter()
    req = _request(ws, db, name, location, branch, fork_point)
    repo = gitrepo.open_repo(ws.mirror_path)
    default, heads = gitrepo.ls_remote(repo, req.location)
    if req.branch is None:
        if default is None:
            raise UserError(f"{req.location}: its HEAD is not a branch; pass --branch")
        req.branch = default
    if req.branch not in heads:
        listed = ", ".join(sorted(heads)[:10]) or "none"
        raise UserError(f"{req.location}: unknown branch {req.branch!r} (branches: {listed})")
    if req.existing is None:
        same = one(
            db,
            "SELECT name FROM sources WHERE kind = 'fork' AND url = ? AND ref = ?",
            [req.location, req.branch],
        )
        if same:
            raise UserError(f"{req.location} branch {req.branch}: already recorded as fork {same['name']}")
    baseline = _baseline(ws, repo)
    final_ref = f"refs/forks/{name}/{req.branch}"
    temp_ref = f"refs/autoresearch-tmp/{name}-{os.getpid()}"
    try:
        head = gitrepo.fetch_branch(repo, req.location, req.branch, temp_ref)
        note = ""
        if req.given and req.suggested_point:
            found = gitrepo.commit_of(repo, req.given)
            if found is None or not gitrepo.is_ancestor(repo, found, head):
                note = f"the suggested fork point {req.given[:12]} is not in the fork; found by content"
                req.given = None
        old = req.existing
        if (
            old is not None
            and old["commit_sha"] == head
            and req.meta.get("baseline") == baseline
            and req.meta.get("fork_point_given") == req.given
        ):
            result = _unchanged(db, old, head, req.meta, started)
        else:
            point = find_fork_point(
                repo,
                baseline,
                head,
                list(ws.settings.target.paths_of_interest),
                close_fraction=ws.settings.kb.forks.close_fraction,
                given=req.given,
            )
            result = _record(ws.settings.kb, repo, db, req, head, baseline, point, started, note)
        gitrepo.update_ref(repo, final_ref, head)
    finally:
        gitrepo.delete_ref(repo, temp_ref)
    return result


def _counts(db: sqlite_utils.Database, source_id: int) -> tuple[int, int, int]:
    row = one(
        db,
        "SELECT count(c.evidence_id) AS n, coalesce(sum(c.upstreamed), 0) AS up, "
        "(SELECT count(*) FROM evidence f WHERE f.source_id = ? AND f.kind = 'fork_file') AS files "
        "FROM evidence e JOIN commits c ON c.evidence_id = e.id WHERE e.source_id = ?",
        [source_id, source_id],
    )
    assert row is not None
    return int(row["n"]), int(row["up"]), int(row["files"])


def _unchanged(
    db: sqlite_utils.Database, existing: dict[str, Any], head: str, meta: dict[str, Any], started: float
) -> ForkResult:
    total, upstreamed, files = _counts(db, existing["id"])
    return ForkResult(
        existing["name"],
        "unchanged",
        f"fork {existing['name']}: up to date at {head[:12]} ({total} commits, none new)",
        existing["id"],
        head,
        existing["merge_base"] or "",
        0,
        total,
        upstreamed,
        time.perf_counter() - started,
        meta.get("fork_point", {}),
        files,
    )


def _mine(
    settings: KBSettings,
    repo: git.Repo,
    head: str,
    point: ForkPoint,
    old_head: str | None,
    known: set[str],
) -> tuple[list[MinedCommit], dict[str, str]]:
    """The fork-only commits not yet recorded, oldest first, and their patch-ids."""
    if point.fork is None:
        return [], {}
    exclude = [f"^{sha}" for sha in point.exclude]
    if old_head and gitrepo.has_commit(repo, old_head) and gitrepo.is_ancestor(repo, old_head, head):
        exclude.append(f"^{old_head}")  # fast path: only what is new since the last refresh
    # Every diff, uncapped, for `git patch-id`: a plain buffered file (millions of lines pass through).
    fd, name = tempfile.mkstemp(prefix="autoresearch-patches-", suffix=".diff")
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as patches:
            lines = gitrepo.stream(
                repo,
                "-c",
                "core.quotePath=false",
                "log",
                "--no-merges",
                "--no-renames",
                "--no-color",
                "--reverse",
                f"--format={LOG_FORMAT}",
                "--raw",
                "--no-abbrev",
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
        ids = gitrepo.patch_ids(repo, Path(name)) if mined else {}
    finally:
        os.unlink(name)
    return mined, ids


EMPTY_PATCH = "empty"
"""The patch key of a commit that changes nothing: as in `git cherry`, it matches any upstream
commit that changes nothing (there is nothing left to port)."""


def upstream_patch_ids(
    repo: git.Repo, baseline: str, head: str, since: str, wanted: set[frozenset[str]]
) -> set[str]:
    """Patch keys of the target's non-merge commits since `since` (and not in the fork's history)
    that change exactly one of the `wanted` sets of files: `git cherry`'s rule, without shared
    history. Only commits whose files match some fork commit's can share its patch-id, so only those
    are diffed; a commit that changes nothing counts as EMPTY_PATCH."""
    if not wanted:
        return set()
    upstream = gitrepo.file_sets(repo, baseline, f"^{since}", f"^{head}")
    candidates = [sha for sha, files in upstream.items() if files and files in wanted]
    found = set(gitrepo.patch_ids_of(repo, candidates).values())
    if frozenset() in wanted and any(not files for files in upstream.values()):
        found.add(EMPTY_PATCH)
    return found


def _patch_key(patch_id: str | None, files: frozenset[str]) -> str | None:
    return patch_id or (EMPTY_PATCH if not files else None)


def _record(
    settings: KBSettings,
    repo: git.Repo,
    db: sqlite_utils.Database,
    req: _Request,
    head: str,
    baseline: str,
    point: ForkPoint,
    started: float,
    note: str = "",
) -> ForkResult:
    from kb.inventory.layout import HistoryBackends

    existing = req.existing
    known: set[str] = set()
    if existing:
        query = "SELECT ref FROM evidence WHERE source_id = ? AND kind = 'commit'"
        known = {r["ref"] for r in rows(db, query, [existing["id"]])}
    old_head = existing["commit_sha"] if existing else None
    mined, ids = _mine(settings, repo, head, point, old_head, known)
    backends = HistoryBackends.for_paths(gitrepo.list_files(repo, head), settings.inventory)
    # `upstreamed`: only the new commits, unless the baseline or the fork point moved (then all).
    previous = req.meta.get("fork_point", {})
    recheck_all = existing is not None and (
        req.meta.get("baseline") != baseline or previous.get("upstream") != point.upstream
    )
    stored = _stored_patches(db, existing["id"]) if recheck_all and existing else {}
    fork_side = {c.sha: (ids.get(c.sha), frozenset(c.files)) for c in mined} | stored
    keys = {sha: _patch_key(pid, files) for sha, (pid, files) in fork_side.items()}
    wanted = {files for sha, (_, files) in fork_side.items() if keys[sha]}
    up_keys = upstream_patch_ids(repo, baseline, head, point.upstream, wanted)
    upstream = {sha: key is not None and key in up_keys for sha, key in keys.items()}
    compare = point.method == "file-level" or (point.method == "given" and not point.close)
    files: list[ForkFile] = []
    differing = 0
    if compare:
        files, differing = compare_files(
            repo,
            baseline,
            head,
            list(point.paths),
            per_file=settings.max_file_diff_bytes,
            max_files=settings.forks.max_files,
            backends=backends,
        )
    baseline_blobs = gitrepo.tree_blobs(repo, baseline) if mined else {}
    created = now()
    meta = {
        **{k: v for k, v in req.meta.items() if k not in ("fork_point", "fork_point_given")},
        "baseline": baseline,
        "location": req.location,
        "fork_point": point.to_meta(),
    }
    if req.given:
        meta["fork_point_given"] = req.given
    with transaction(db):
        if existing is None:
            source_id = insert(
                db,
                "sources",
                {
                    "kind": "fork",
                    "name": req.name,
                    "url": req.location,
                    "ref": req.branch,
                    "commit_sha": head,
                    "merge_base": point.upstream,
                    "title": f"fork {req.name} ({req.branch})",
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
                {"commit_sha": head, "merge_base": point.upstream, "meta": meta, "updated_at": created},
            )
        for commit in mined:
            facts = commit_facts(commit.files, commit.message, backends)
            same = sum(commit.blobs.get(p, "") == baseline_blobs.get(p) for p in commit.files)
            flag = upstream.get(commit.sha, False)
            _insert_commit(db, source_id, req.name, commit, ids.get(commit.sha), flag, facts, same)
        _fill_facts(db, source_id, backends)
        if stored:
            db.conn.executemany(
                "UPDATE commits SET upstreamed = ? WHERE sha = ? AND evidence_id IN "
                "(SELECT id FROM evidence WHERE source_id = ?)",
                [(int(upstream[sha]), sha, source_id) for sha in stored],
            )
        if compare:
            store_files(db, source_id, req.name, head, baseline, files)
        total, upstreamed, recorded = _counts(db, source_id)
        status: Literal["added", "refreshed"] = "added" if existing is None else "refreshed"
        message = _message(req.name, status, mined, total, upstreamed, head, point, recorded, differing)
        if note:
            message += f" ({note})"
        log_event(db, "kb.fork", message, data={"source_id": source_id, "head": head, "new": len(mined)})
    return ForkResult(
        req.name,
        status,
        message,
        source_id,
        head,
        point.upstream,
        len(mined),
        total,
        upstreamed,
        time.perf_counter() - started,
        point.to_meta(),
        recorded,
    )


def _message(
    name: str,
    status: str,
    mined: list[MinedCommit],
    total: int,
    upstreamed: int,
    head: str,
    point: ForkPoint,
    recorded: int,
    differing: int,
) -> str:
    if point.fork is None:
        message = f"fork {name}: {status} at {head[:12]}; {point.describe()}; no fork-only commits"
    else:
        message = (
            f"fork {name}: {status} {len(mined)} new commit{'s' if len(mined) != 1 else ''} "
            f"({total} fork-only, {upstreamed} already upstream) at {head[:12]}, {point.describe()}"
        )
    if recorded or differing:
        left = f" (the first {recorded:,})" if recorded < differing else ""
        message += f"; compared file by file: {differing:,} files differ from the baseline{left}"
    binary = sum(bool(c.binary_files) for c in mined)
    truncated = sum(c.diff_truncated for c in mined)
    if binary or truncated:
        message += f"; {binary} with binary files, {truncated} with diffs cut at the size caps"
    return message


_Patch = tuple[str | None, frozenset[str]]
"""A commit's patch-id (None for an empty diff) and the files it changes."""


def _stored_patches(db: sqlite_utils.Database, source_id: int) -> dict[str, _Patch]:
    found = rows(
        db,
        "SELECT c.sha, c.patch_id, c.files FROM commits c JOIN evidence e ON e.id = c.evidence_id "
        "WHERE e.source_id = ? AND e.kind = 'commit'",
        [source_id],
    )
    return {r["sha"]: (r["patch_id"], frozenset(decoded_list(r["files"]))) for r in found}


def _fill_facts(db: sqlite_utils.Database, source_id: int, backends: HistoryBackends) -> None:
    """Commits mined before their facts were recorded (an older schema) get them now."""
    found = rows(
        db,
        "SELECT c.evidence_id, c.files, c.message, c.subject FROM commits c JOIN evidence e "
        "ON e.id = c.evidence_id WHERE e.source_id = ? AND c.backends IS NULL",
        [source_id],
    )
    for r in found:
        facts = commit_facts(decoded_list(r["files"]), r["message"] or r["subject"], backends)
        values = [json.dumps(facts.backends), json.dumps(facts.areas), json.dumps(facts.claims_json())]
        db.execute(
            "UPDATE commits SET backends = ?, areas = ?, claims = ? WHERE evidence_id = ?",
            [*values, r["evidence_id"]],
        )


def _insert_commit(
    db: sqlite_utils.Database,
    source_id: int,
    fork: str,
    commit: MinedCommit,
    patch_id: str | None,
    upstreamed: bool,
    facts: CommitFacts,
    files_in_baseline: int,
) -> None:
    meta: dict[str, Any] = {
        "fork": fork,
        "author": commit.author,
        "date": commit.date,
        "upstreamed": upstreamed,
        "backends": facts.backends,
        "areas": facts.areas,
        "files_in_baseline": files_in_baseline,
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
            "backends": facts.backends,
            "areas": facts.areas,
            "claims": facts.claims_json(),
        },
    )
    db.conn.executemany(
        "INSERT OR IGNORE INTO commit_files (evidence_id, path) VALUES (?, ?)",
        [(evidence_id, path) for path in commit.files],
    )
