"""Where a fork left the target, also when the two share no commit (rewritten or unrelated history).

    point = find_fork_point(repo, baseline, head, paths, close_fraction=0.2)
    point.method, point.upstream, point.fork, point.exclude, point.describe()

In this order:
1. `given`: a fork commit the user (or the recipe) names, for targets with no history to find it by;
2. `merge-base`: the histories share commits (the usual fork);
3. `identical-tree`: the newest fork commit whose tree is the tree of a target commit. Tree shas are
   compared, so thousands of commits cost one `git log` per side. ik_llama.cpp rewrote its history
   (signatures removed): none of its commits is upstream's, but 3,198 have upstream trees. Every fork
   commit with an upstream tree is upstream work, not the fork's: the fork-only commits are those
   that descend from none of them;
4. `closest-tree`: else the pair of commits (first-parent lines of both sides) whose files under the
   paths of interest differ least, found by walking each history once with the changes of each
   commit (`git log --raw`), alternately from each side; said as "N of M files differ";
5. `file-level`: when even the closest pair is far (more than `close_fraction` of the files differ),
   there is no fork point: the fork's files are compared with the baseline's one by one instead.

A target with a single commit (the recipe's sdist tree) is the same search with one target commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kb import gitrepo
from kb.errors import UserError

if TYPE_CHECKING:
    import git

Method = Literal["given", "merge-base", "identical-tree", "closest-tree", "file-level"]
_NULL = "0" * 40
_ROUNDS = 4


@dataclass(frozen=True)
class ForkPoint:
    method: Method
    upstream: str
    """The target's commit at the fork point (the merge base, the identical or closest commit)."""
    fork: str | None
    """The fork's commit there: the fork-only commits descend from it. None in file-level mode."""
    exclude: tuple[str, ...] = ()
    """Commits whose ancestry is not the fork's own work (`^` each when listing fork-only commits)."""
    differing: int = 0
    """Files that differ between the two commits under the paths compared."""
    total: int = 0
    """Files under the paths compared, in either commit."""
    paths: tuple[str, ...] = ()
    """The paths compared (the paths of interest; empty: the whole tree)."""
    close: bool = True
    nearest: str | None = None
    """The fork commit closest to the target when it is too far to be the fork point."""

    @property
    def fraction(self) -> float:
        return self.differing / self.total if self.total else 0.0

    def distance(self) -> str:
        where = "under the paths of interest" if self.paths else "in the tree"
        return f"{self.differing:,} of {self.total:,} files differ {where}"

    def describe(self) -> str:
        up, fork = self.upstream[:12], (self.fork or "")[:12]
        if self.method == "merge-base":
            return f"merge base {up}"
        if self.method == "identical-tree":
            return f"fork commit {fork} has the tree of target commit {up} (the newest identical pair)"
        if self.method == "given":
            far = "; far from the target" if not self.close else ""
            return f"given fork point {fork}; against target commit {up} {self.distance()}{far}"
        if self.method == "closest-tree":
            return f"closest by content: fork commit {fork} and target commit {up}, {self.distance()}"
        pair = f"fork commit {(self.nearest or '')[:12]}, target commit {up}"
        return f"no fork point: the closest pair ({pair}) is far, {self.distance()}"

    def to_meta(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "upstream": self.upstream,
            "fork": self.fork,
            "differing": self.differing,
            "total": self.total,
            "paths": list(self.paths),
            "close": self.close,
            "excluded": len(self.exclude),
            "nearest": self.nearest,
            "description": self.describe(),
        }


# --- the search ------------------------------------------------------------------------------------


def find_fork_point(
    repo: git.Repo,
    baseline: str,
    head: str,
    paths: list[str],
    *,
    close_fraction: float,
    given: str | None = None,
) -> ForkPoint:
    """The fork point of `head` (the fork) against `baseline` (the target), by the first rule that holds."""
    scope = tuple(paths)
    if given:
        return _given(repo, baseline, head, given, scope, close_fraction)
    base = gitrepo.merge_base(repo, baseline, head)
    if base is not None:
        return ForkPoint("merge-base", base, base, (baseline,), paths=scope)
    identical = _identical_tree(repo, baseline, head)
    if identical is not None:
        return identical
    fork, upstream, differing, total = closest_pair(repo, baseline, head, list(scope))
    close = total > 0 and differing / total <= close_fraction
    if close:
        return ForkPoint("closest-tree", upstream, fork, (fork,), differing, total, scope, True)
    return ForkPoint("file-level", upstream, None, (), differing, total, scope, False, nearest=fork)


def _given(
    repo: git.Repo, baseline: str, head: str, given: str, scope: tuple[str, ...], close_fraction: float
) -> ForkPoint:
    fork = gitrepo.commit_of(repo, given)
    if fork is None or not gitrepo.is_ancestor(repo, fork, head):
        raise UserError(f"fork point {given}: not a commit of the fork's branch")
    upstream, differing, total = _closest_to(repo, baseline, fork, scope)
    close = total == 0 or differing / total <= close_fraction
    return ForkPoint("given", upstream, fork, (fork,), differing, total, scope, close)


def _identical_tree(repo: git.Repo, baseline: str, head: str) -> ForkPoint | None:
    upstream_trees: dict[str, str] = {}
    for sha, tree, _ in gitrepo.commit_graph(repo, baseline):
        upstream_trees.setdefault(tree, sha)  # newest first: the newest commit with that tree
    graph = gitrepo.commit_graph(repo, head)
    matched = {sha for sha, tree, _ in graph if tree in upstream_trees}
    if not matched:
        return None
    newest = next(sha for sha, _, _ in graph if sha in matched)
    tree = next(t for sha, t, _ in graph if sha == newest)
    files = len(gitrepo.tree_blobs(repo, newest))  # the whole trees are identical
    return ForkPoint(
        "identical-tree", upstream_trees[tree], newest, tuple(frontier(graph, matched)), 0, files
    )


def frontier(graph: list[tuple[str, str, tuple[str, ...]]], marked: set[str]) -> list[str]:
    """The marked commits that are not ancestors of another marked one (`graph`: children first)."""
    below: set[str] = set()
    out: list[str] = []
    for sha, _, parents in graph:
        if sha in below:
            below.update(parents)
        elif sha in marked:
            out.append(sha)
            below.update(parents)
    return out


# --- the closest pair by content ---------------------------------------------------------------------


def closest_pair(repo: git.Repo, baseline: str, head: str, paths: list[str]) -> tuple[str, str, int, int]:
    """(fork commit, target commit, files differing, files compared) of the closest pair found by
    alternating walks: the fork commit closest to the baseline, the target commit closest to that,
    and so on until the pair stops changing."""
    scope = tuple(paths)
    upstream = baseline
    fork, differing, total = _closest_to(repo, head, upstream, scope)
    best = (fork, upstream, differing, total)
    for _ in range(_ROUNDS):
        upstream, differing, total = _closest_to(repo, baseline, fork, scope)
        fork, differing, total = _closest_to(repo, head, upstream, scope)
        if _key(differing, total) >= _key(best[2], best[3]):
            break
        best = (fork, upstream, differing, total)
    return best


def _closest_to(repo: git.Repo, tip: str, other: str, scope: tuple[str, ...]) -> tuple[str, int, int]:
    return closest_commit(repo, tip, gitrepo.tree_blobs(repo, other, list(scope)), scope)


def _key(differing: int, total: int) -> float:
    """Closeness: the fraction of files that differ (ties go to the newer commit, found first)."""
    return differing / total if total else 1.0


def closest_commit(
    repo: git.Repo, tip: str, target: dict[str, str], paths: tuple[str, ...]
) -> tuple[str, int, int]:
    """(commit, files differing, files compared) of the commit on `tip`'s first-parent line whose
    files under `paths` are closest to `target` ({path: blob}); the newest of equals wins.

    One walk: the tip's files, then each commit's changes undone in turn, the count kept up to date."""
    state = gitrepo.tree_blobs(repo, tip, list(paths))
    union = set(state) | set(target)
    differing = sum(state.get(p) != target.get(p) for p in union)
    total = len(union)
    best = (tip, differing, total)
    if differing == 0:
        return best
    for parent, changes in first_parent_changes(repo, tip, paths):
        for path, old in changes:
            before = (state.get(path) != target.get(path), path in state or path in target)
            if old is None:
                state.pop(path, None)
            else:
                state[path] = old
            after = (state.get(path) != target.get(path), path in state or path in target)
            differing += after[0] - before[0]
            total += after[1] - before[1]
        if parent is None:
            break  # before the root commit there is nothing to compare
        if _key(differing, total) < _key(best[1], best[2]):
            best = (parent, differing, total)
            if differing == 0:
                break
    return best


def first_parent_changes(
    repo: git.Repo, tip: str, paths: tuple[str, ...]
) -> Iterator[tuple[str | None, list[tuple[str, str | None]]]]:
    """Newest first along the first parents of `tip`, for each commit that changes `paths`: (its
    first parent, [(path, the blob before the commit or None)]). Undoing them in order gives the
    files of each parent."""
    lines = gitrepo.stream(
        repo,
        "-c",
        "core.quotePath=false",
        "log",
        "--first-parent",
        "--diff-merges=first-parent",
        "--raw",
        "--no-renames",
        "--no-abbrev",
        "--format=%x1e%H %P",
        tip,
        "--",
        *paths,
    )
    parent: str | None = None
    changes: list[tuple[str, str | None]] = []
    started = False
    for raw in lines:
        if raw.startswith(b"\x1e"):
            if started:
                yield parent, changes
            fields = raw[1:].decode().split()
            parent = fields[1] if len(fields) > 1 else None
            changes = []
            started = True
        elif raw.startswith(b":"):
            meta, _, path = raw.rstrip(b"\n").partition(b"\t")
            old = meta.split()[2].decode()
            changes.append((gitrepo.unquote_path(path), None if old == _NULL else old))
    if started:
        yield parent, changes
