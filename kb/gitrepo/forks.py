"""Reading forks (kb/forks.py, kb/forkpoint.py): remote refs and fetching, ancestry, and the batched
reads (`git cat-file --batch`, one `git log`) that keep thousands of fork commits to a few processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import UserError
from kb.gitrepo.plumbing import run, run_unchecked

if TYPE_CHECKING:
    import git


# A remote that wants credentials fails at once instead of waiting for a password on the terminal.
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}


def ls_remote(repo: git.Repo, location: str) -> tuple[str | None, dict[str, str]]:
    """(default branch or None when HEAD is detached, {branch: sha}) of a remote or local repository."""
    code, out, err = run_unchecked(
        repo, "ls-remote", "--symref", location, "HEAD", "refs/heads/*", env=_NO_PROMPT
    )
    if code != 0:
        detail = err.strip().splitlines()
        reason = detail[-1] if detail else f"exit {code}"
        raise UserError(f"{location}: cannot read the repository ({reason})")
    default: str | None = None
    heads: dict[str, str] = {}
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if left.startswith("ref: ") and name == "HEAD":
            default = left[5:].removeprefix("refs/heads/")
        elif name.startswith("refs/heads/"):
            heads[name.removeprefix("refs/heads/")] = left
    return default, heads


def fetch_branch(repo: git.Repo, location: str, branch: str, dest_ref: str) -> str:
    """Fetch one branch of `location` into `dest_ref` of this repository; return the fetched sha."""
    code, _, err = run_unchecked(
        repo,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        location,
        f"+refs/heads/{branch}:{dest_ref}",
        env=_NO_PROMPT,
    )
    if code != 0:
        detail = err.strip().splitlines()
        reason = detail[-1] if detail else f"exit {code}"
        raise UserError(f"{location}: cannot fetch branch {branch} ({reason})")
    return run(repo, "rev-parse", "--verify", f"{dest_ref}^{{commit}}").strip()


def merge_base(repo: git.Repo, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when they share no history."""
    code, out, err = run_unchecked(repo, "merge-base", a, b)
    if code == 1 and not err.strip():
        return None
    if code != 0:
        raise UserError(f"git merge-base {a[:12]} {b[:12]}: {err.strip() or f'exit {code}'}")
    return out.strip()


def is_ancestor(repo: git.Repo, ancestor: str, descendant: str) -> bool:
    code, _, _ = run_unchecked(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    return code == 0


def update_ref(repo: git.Repo, ref: str, sha: str) -> None:
    run(repo, "update-ref", ref, sha)


def delete_ref(repo: git.Repo, ref: str) -> None:
    run_unchecked(repo, "update-ref", "-d", ref)


def stream(repo: git.Repo, *args: str) -> Iterator[bytes]:
    """Lines (bytes) of a long git command's output as it runs: one process for thousands of commits,
    constant memory. A failing command raises UserError once its output is consumed."""
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            ["git", "--git-dir", str(repo.git_dir), *args],
            cwd=repo.working_tree_dir or repo.git_dir,
            stdout=subprocess.PIPE,
            stderr=errors,
            bufsize=1 << 16,
        )
        assert process.stdout is not None
        finished = False
        try:
            yield from process.stdout
            finished = True
        finally:
            process.stdout.close()
            if not finished:
                process.kill()  # the consumer stopped early
            code = process.wait()
        if code != 0:
            errors.seek(0)
            detail = errors.read().decode("utf-8", "replace").strip().splitlines()
            raise UserError(f"git {args[0]}: {detail[-1] if detail else f'exit {code}'}")


def cherry(repo: git.Repo, upstream: str, head: str) -> dict[str, bool]:
    """For each non-merge commit of `head` not in `upstream`: True when an equivalent change (same
    patch-id) is already in `upstream` since the fork point (`git cherry`)."""
    found: dict[str, bool] = {}
    for line in run(repo, "cherry", upstream, head).splitlines():
        mark, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = mark == "-"
    return found


def patch_ids(repo: git.Repo, patches: Path) -> dict[str, str]:
    """{commit sha: stable patch-id} for a file of `commit <sha>` headers each followed by its diff."""
    import subprocess

    with patches.open("rb") as stdin:
        result = subprocess.run(
            ["git", "--git-dir", str(repo.git_dir), "patch-id", "--stable"],
            stdin=stdin,
            capture_output=True,
        )
    if result.returncode != 0:
        raise UserError(f"git patch-id: {result.stderr.decode('utf-8', 'replace').strip()}")
    found: dict[str, str] = {}
    for line in result.stdout.decode("ascii", "replace").splitlines():
        patch_id, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = patch_id
    return found


def read_files(repo: git.Repo, commit: str, paths: list[str]) -> dict[str, str]:
    """{path: text} of many files of a commit in one `git cat-file --batch` (missing paths left out)."""
    import subprocess

    if not paths:
        return {}
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    result = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), "cat-file", "--batch"], input=request, capture_output=True
    )
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip()
        raise UserError(f"git cat-file: {detail or f'exit {result.returncode}'}")
    out = result.stdout
    found: dict[str, str] = {}
    pos = 0
    for path in paths:
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        pos = nl + 1
        if len(header) < 3 or header[1] != b"blob":
            continue  # "<name> missing", or not a file
        size = int(header[2])
        found[path] = out[pos : pos + size].decode("utf-8", errors="replace")
        pos += size + 1
    return found


def checkout_head(path: Path) -> str | None:
    """HEAD of the work tree whose top folder is `path`, or None (not a checkout, or a folder inside one)."""
    import subprocess

    result = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True
    )
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        return None
    return lines[1] if Path(lines[0]).resolve() == path.resolve() else None


def unquote_path(raw: bytes) -> str:
    """Paths in git's output with special characters come C-quoted ("a\\tb"); the rest are verbatim."""
    import codecs

    if raw.startswith(b'"') and raw.endswith(b'"'):
        raw = codecs.escape_decode(raw[1:-1])[0]
    return raw.decode("utf-8", "replace")


def commit_graph(repo: git.Repo, tip: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(sha, tree, parents) of every commit reachable from `tip`, children before their parents."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for line in run(repo, "log", "--topo-order", "--format=%H %T %P", tip).splitlines():
        sha, tree, *parents = line.split()
        found.append((sha, tree, tuple(parents)))
    return found


def tree_blobs(repo: git.Repo, commit: str, paths: list[str] | None = None) -> dict[str, str]:
    """{path: blob sha} of the files of a commit (optionally under some paths; submodules left out)."""
    out = run(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *(paths or []))
    found: dict[str, str] = {}
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob":
            found[path] = parts[2]
    return found


def file_sets(repo: git.Repo, *revisions: str) -> dict[str, frozenset[str]]:
    """{sha: the paths it changes} of the non-merge commits of `revisions` (e.g. `b`, `^a`)."""
    out = run(repo, "log", "--no-merges", "--no-renames", "-z", "--format=%x1e%H", "--name-only", *revisions)
    found: dict[str, frozenset[str]] = {}
    for record in out.split("\x1e"):
        sha, *paths = record.split("\0")  # "<sha>\0\n<path>\0<path>\0"
        if sha.strip():
            found[sha.strip()] = frozenset(p.strip("\n") for p in paths if p.strip("\n"))
    return found


def patch_ids_of(repo: git.Repo, shas: list[str]) -> dict[str, str]:
    """{sha: stable patch-id} of commits given by sha: one `diff-tree --stdin` piped into `patch-id`."""
    import subprocess

    if not shas:
        return {}
    base = ["git", "--git-dir", str(repo.git_dir)]
    diff = subprocess.Popen(
        [*base, "diff-tree", "--stdin", "-p", "-r", "--root", "--no-renames", "--no-color", "--no-ext-diff"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert diff.stdin is not None and diff.stdout is not None
    ids = subprocess.Popen(
        [*base, "patch-id", "--stable"], stdin=diff.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    diff.stdout.close()  # patch-id owns the pipe now
    import threading

    def feed() -> None:
        assert diff.stdin is not None
        try:
            diff.stdin.write("".join(f"{sha}\n" for sha in shas).encode())
        finally:
            diff.stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out, err = ids.communicate()
    writer.join()
    if diff.wait() != 0 or ids.returncode != 0:
        raise UserError(f"git patch-id: {err.decode('utf-8', 'replace').strip() or 'failed'}")
    found: dict[str, str] = {}
    for line in out.decode("ascii", "replace").splitlines():
        patch_id, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = patch_id
    return found


def ls_remote_refs(repo: git.Repo, location: str, *patterns: str) -> dict[str, str]:
    """{ref: sha} of a remote's refs matching `patterns` (`refs/pull/*/head`): pull requests a host
    exposes as refs, read without fetching them."""
    code, out, err = run_unchecked(repo, "ls-remote", location, *patterns, env=_NO_PROMPT)
    if code != 0:
        detail = err.strip().splitlines()
        raise UserError(
            f"{location}: cannot read the repository ({detail[-1] if detail else f'exit {code}'})"
        )
    found: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref and len(sha) == 40:
            found[ref] = sha
    return found


def fetch_refs(repo: git.Repo, location: str, refspecs: list[str]) -> None:
    """Fetch many refs of `location` in one `git fetch` (`+refs/pull/12/head:refs/prs/x/12`, ...)."""
    if not refspecs:
        return
    code, _, err = run_unchecked(
        repo, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", location, *refspecs, env=_NO_PROMPT
    )
    if code != 0:
        detail = err.strip().splitlines()
        raise UserError(
            f"{location}: cannot fetch {len(refspecs)} refs ({detail[-1] if detail else f'exit {code}'})"
        )


def range_diff(repo: git.Repo, base: str, head: str) -> tuple[str, list[str]]:
    """The combined diff of `base..head` (full blob names, so a three-way merge can find its
    preimages) and the paths it changes."""
    diff = run(repo, "diff", "--no-color", "--no-ext-diff", "--no-renames", "--full-index", base, head)
    names = run(repo, "diff", "--no-renames", "--name-only", "-z", base, head)
    return diff, [p for p in names.split("\0") if p]
