"""The upstream's pull requests: `kb add-prs REMOTE` reads the pull-request heads a git host exposes
as refs (GitHub's `refs/pull/N/head`, GitLab's `refs/merge-requests/N/head`), newest first up to
`--limit`, fetches them into the workspace mirror in one `git fetch` (`refs/prs/<name>/N`) and
records each as a fork of its own (`<name>-prN`, kb/forks.py's machinery: its commits since the
fork point, their patch-ids, `upstreamed` by git cherry's rule), plus a `pull_requests` row with its
state, its title and description and its combined diff against the baseline
(merge-base..head). The pull-request miner (runner/research/miners/prs.py) turns the ones whose
change the baseline lacks into hypotheses, one per pull request.

Title and description: from the host's API when `kb.prs.host_api` allows (auto: try it, and fall
back on a failure; off: never), one call per 100 pull requests (GitHub's `GET /repos/{owner}/
{repo}/pulls?state=all`: number, title, body, state, merged_at, html_url, user.login; GitLab's
`GET /projects/{path}/merge_requests?state=all`: iid, title, description, state, web_url,
author.username); else from the head commit (its subject and body), said so.

Already upstream (flagged, not mined): a pull request whose head is in the baseline's history
(merged as it was), whose every commit the baseline has (same patch-ids), or whose combined diff
the baseline already contains (it applies in reverse: squash-merged). State: the API's (open,
closed, merged); without it `merged` for those upstream, `open` for a GitHub pull request with a
merge ref (GitHub keeps `refs/pull/N/merge` for open ones), else `unknown`. With `--state open`
(the default) pull requests the API says were closed unmerged are left out.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from kb import gitrepo
from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import prs as store

if TYPE_CHECKING:
    import git
    import sqlite_utils

    from kb.workspace import Workspace

_REF = re.compile(r"^refs/(pull|merge-requests)/(\d+)/(head|merge)$")
_HOSTED = re.compile(r"^(?:https?://|ssh://(?:[^@/]+@)?|git@)([^/:]+)[/:](.+?)(?:\.git)?/?$")
PER_PAGE = 100


@dataclass
class PullRequest:
    number: int
    head: str
    state: str = "unknown"
    title: str = ""
    body: str = ""
    url: str | None = None
    author: str | None = None
    described_by: Literal["api", "commit"] = "commit"
    upstream: bool = False
    upstream_reason: str | None = None
    commits: int = 0
    files: int = 0
    status: str = ""
    """added, refreshed, unchanged, or skipped (with `upstream_reason` saying why)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PRReport:
    remote: str
    host: str
    name: str
    pulls: list[PullRequest] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left_out: int = 0
    """Pull requests past --limit, or closed unmerged (with --state open)."""
    seconds: float = 0.0

    def line(self) -> str:
        upstream = sum(p.upstream for p in self.pulls)
        states: dict[str, int] = {}
        for p in self.pulls:
            if not p.upstream:
                states[p.state] = states.get(p.state, 0) + 1
        shown = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "none to mine"
        return (
            f"{self.remote}: {len(self.pulls)} pull requests read ({shown}; {upstream} already upstream)"
            + (f", {self.left_out} left out" if self.left_out else "")
            + f" in {self.seconds:.1f} s"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pulls": [p.to_json() for p in self.pulls]}


def _prefix(remote: str) -> str:
    base = remote.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip(".-_") or "upstream"
    return clean[:50]


def _project(remote: str) -> tuple[str, str] | None:
    """(host, owner/name) of a hosted remote URL (https, ssh or scp-like); None for a local path."""
    match = _HOSTED.match(remote.strip())
    return (match.group(1).lower(), match.group(2)) if match else None


def _heads(refs: dict[str, str]) -> tuple[str, dict[int, str], set[int]]:
    """(host, {number: head sha}, numbers with a GitHub merge ref) from a remote's refs."""
    heads: dict[int, str] = {}
    merge: set[int] = set()
    kinds: set[str] = set()
    for ref, sha in refs.items():
        match = _REF.match(ref)
        if not match:
            continue
        kinds.add(match.group(1))
        if match.group(3) == "head":
            heads[int(match.group(2))] = sha
        else:
            merge.add(int(match.group(2)))
    host = "github" if "pull" in kinds else "gitlab"
    return host, heads, merge


# --- the host's API ---------------------------------------------------------------------------------


def _api_get(url: str, ws: Workspace, token: str | None) -> Any:
    from kb.fetch import get
    from kb.papers.fetching import USER_AGENT

    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    page = get(url, timeout=ws.settings.kb.fetch_timeout, max_bytes=20_000_000, headers=headers)
    try:
        return json.loads(page.data)
    except ValueError as exc:
        raise UserError(f"{url}: malformed answer (not JSON: {exc})") from None


def _described(
    ws: Workspace, host: str, project: str, api: str, wanted: set[int]
) -> dict[int, dict[str, Any]]:
    """{number: {title, body, state, url, author}} from the host's API, one page of 100 at a time,
    newest first, until every wanted number is seen (or the pages run out)."""
    import os

    if host == "github":
        base = f"{api.rstrip('/')}/repos/{project}/pulls"
        token = os.environ.get("GITHUB_TOKEN", "").strip() or None
    else:
        base = f"{api.rstrip('/')}/projects/{quote(project, safe='')}/merge_requests"
        token = os.environ.get("GITLAB_TOKEN", "").strip() or None
    order = "sort=created&direction=desc" if host == "github" else "order_by=created_at&sort=desc"
    found: dict[int, dict[str, Any]] = {}
    for page in range(1, len(wanted) // PER_PAGE + 3):
        answer = _api_get(f"{base}?state=all&per_page={PER_PAGE}&page={page}&{order}", ws, token)
        if not isinstance(answer, list):
            raise UserError(f"{base}: malformed answer (not a list of pull requests)")
        for item in answer:
            if isinstance(item, dict):
                parsed = _github(item) if host == "github" else _gitlab(item)
                if parsed is not None:
                    found[parsed[0]] = parsed[1]
        if len(answer) < PER_PAGE or wanted <= set(found):
            break
    return found


def _github(item: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    number = item.get("number")
    if not isinstance(number, int) or not isinstance(item.get("title"), str):
        return None
    state = "merged" if item.get("merged_at") else str(item.get("state") or "unknown")
    user = item["user"] if isinstance(item.get("user"), dict) else {}
    return number, {
        "title": item["title"],
        "body": item.get("body") if isinstance(item.get("body"), str) else "",
        "state": state if state in ("open", "closed", "merged") else "unknown",
        "url": item.get("html_url") if isinstance(item.get("html_url"), str) else None,
        "author": user.get("login") if isinstance(user.get("login"), str) else None,
    }


def _gitlab(item: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    number = item.get("iid")
    if not isinstance(number, int) or not isinstance(item.get("title"), str):
        return None
    state = {"opened": "open", "closed": "closed", "merged": "merged", "locked": "closed"}.get(
        str(item.get("state")), "unknown"
    )
    author = item["author"] if isinstance(item.get("author"), dict) else {}
    return number, {
        "title": item["title"],
        "body": item.get("description") if isinstance(item.get("description"), str) else "",
        "state": state,
        "url": item.get("web_url") if isinstance(item.get("web_url"), str) else None,
        "author": author.get("username") if isinstance(author.get("username"), str) else None,
    }


def _api_allowed(
    ws: Workspace, remote: str, host: str, project: str | None, notes: list[str]
) -> tuple[str, str] | None:
    """(the project path, the API's base) to ask the host about, or None (and a note) when it is
    not asked."""
    settings = ws.settings.kb.prs
    if settings.host_api == "off":
        notes.append("titles and descriptions from the head commits (kb.prs.host_api = off)")
        return None
    hosted = _project(remote)
    project = project or (hosted[1] if hosted else None)
    if project is None:
        notes.append(
            f"titles and descriptions from the head commits ({remote} names no project; give --project)"
        )
        return None
    if host == "github":
        return project, settings.github_api
    if settings.gitlab_api:
        return project, settings.gitlab_api
    if hosted is None:
        notes.append("titles and descriptions from the head commits (set kb.prs.gitlab_api)")
        return None
    return project, f"https://{hosted[0]}/api/v4"


# --- recording ----------------------------------------------------------------------------------------


def _from_commit(repo: git.Repo, head: str) -> tuple[str, str]:
    out = gitrepo.run(repo, "log", "-1", "--format=%s%x00%b", head)
    subject, _, body = out.partition("\x00")
    return subject.strip() or head[:12], body.strip()


def _upstream(
    repo: git.Repo,
    baseline: str,
    head: str,
    base: str | None,
    diff: str,
    commits: list[store.PullRequestCommit],
) -> str | None:
    """Why the pull request's change is already in the baseline, or None."""
    if gitrepo.is_ancestor(repo, head, baseline):
        return "its head is in the baseline's history (merged)"
    if commits and all(c["upstreamed"] for c in commits):
        return "the baseline has each of its commits (same patch-ids)"
    if base is None or not diff.strip():
        return None
    if gitrepo.apply_check(repo, baseline, diff, reverse=True) is None:
        return "the baseline already contains its change (its diff applies in reverse: squash-merged)"
    merged = gitrepo.three_way(repo, baseline, diff)
    if merged.diff is None and "changes nothing" in merged.error:
        return "the baseline already contains its change (a three-way merge changes nothing: squash-merged)"
    return None


def add_prs(
    ws: Workspace,
    db: sqlite_utils.Database,
    remote: str,
    *,
    name: str | None = None,
    limit: int | None = None,
    state: Literal["open", "all"] = "open",
    project: str | None = None,
    progress: Callable[[PullRequest], None] | None = None,
) -> PRReport:
    """Read the newest pull requests of `remote` (see the module docstring). Bad input (no such
    remote, no pull-request refs) is one UserError; nothing is written then."""
    from kb.forks import _location, record_fetched

    started = time.perf_counter()
    location = _location(remote)
    repo = gitrepo.open_repo(ws.mirror_path)
    refs = gitrepo.ls_remote_refs(
        repo, location, "refs/pull/*/head", "refs/pull/*/merge", "refs/merge-requests/*/head"
    )
    host, heads, merge_refs = _heads(refs)
    if not heads:
        raise UserError(
            f"{remote}: no pull-request refs (refs/pull/*/head or refs/merge-requests/*/head) to read"
        )
    prefix = name or _prefix(location)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,50}", prefix):
        raise UserError(f"--name {prefix}: letters, digits, '.', '_', '-' (up to 51 characters)")
    report = PRReport(remote, host, prefix)
    numbers = sorted(heads, reverse=True)
    cap = limit or ws.settings.kb.prs.limit
    report.left_out = max(0, len(numbers) - cap)
    numbers = numbers[:cap]
    described: dict[int, dict[str, Any]] = {}
    asked = _api_allowed(ws, location, host, project, report.notes)
    if asked is not None:
        try:
            described = _described(ws, host, asked[0], asked[1], set(numbers))
        except UserError as exc:
            report.notes.append(
                f"the host's API failed ({exc}): titles and descriptions from the head commits"
            )
    if state == "open":
        closed = [n for n in numbers if described.get(n, {}).get("state") == "closed"]
        report.left_out += len(closed)
        numbers = [n for n in numbers if n not in closed]
    kind = "pull" if host == "github" else "merge-requests"
    gitrepo.fetch_refs(repo, location, [f"+refs/{kind}/{n}/head:refs/prs/{prefix}/{n}" for n in numbers])
    target = ws.settings.target
    baseline = target.baseline_commit or gitrepo.resolve(repo, target.baseline)
    limit_bytes = ws.settings.kb.max_commit_diff_bytes
    for number in numbers:
        head = heads[number]
        pull = PullRequest(number, head)
        facts = described.get(number)
        if facts is not None:
            pull.title, pull.body, pull.state = facts["title"], facts["body"] or "", facts["state"]
            pull.url, pull.author, pull.described_by = facts["url"], facts["author"], "api"
        else:
            pull.title, pull.body = _from_commit(repo, head)
            pull.state = "open" if number in merge_refs else "unknown"
        base = gitrepo.merge_base(repo, baseline, head)
        if base is None:
            pull.status, pull.upstream_reason = "skipped", "shares no history with the baseline"
            report.pulls.append(pull)
            continue
        fork = record_fetched(
            ws, db, f"{prefix}-pr{number}", location, f"refs/{kind}/{number}/head", head, title=pull.title
        )
        diff, files = gitrepo.range_diff(repo, base, head)
        commits = store.commits_of(db, fork.source_id)
        reason = _upstream(repo, baseline, head, base, diff, commits)
        pull.upstream, pull.upstream_reason = reason is not None, reason
        if pull.upstream and pull.described_by == "commit":
            pull.state = "merged"
        pull.commits, pull.files, pull.status = len(commits), len(files), fork.status
        truncated = len(diff.encode()) > limit_bytes
        with transaction(db):
            store.save(
                db,
                {
                    "source_id": fork.source_id,
                    "remote": location,
                    "host": host,
                    "number": number,
                    "head_sha": head,
                    "merge_base": base,
                    "state": pull.state,
                    "upstream": int(pull.upstream),
                    "upstream_reason": reason,
                    "title": pull.title,
                    "body": pull.body,
                    "url": pull.url,
                    "author": pull.author,
                    "described_by": pull.described_by,
                    "files": json.dumps(files),
                    "diff": diff.encode()[:limit_bytes].decode("utf-8", "ignore") if truncated else diff,
                    "diff_truncated": int(truncated),
                    "updated_at": now(),
                },
            )
            if pull.upstream:
                store.mark_commits_upstream(db, fork.source_id)
        report.pulls.append(pull)
        if progress is not None:
            progress(pull)
    report.seconds = time.perf_counter() - started
    with transaction(db):
        log_event(
            db, "kb.prs", report.line(), data={"remote": location, "pulls": [p.number for p in report.pulls]}
        )
    return report
