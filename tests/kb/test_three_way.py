"""kb.gitrepo's checks of many diffs at once and its three-way merge, on repositories the tests build
(the mirror is bare: both work on a throw-away index, no work tree)."""

from __future__ import annotations

from pathlib import Path

from kb import gitrepo
from tests.conftest import git

LINES = "".join(f"line {i}\n" for i in range(1, 21))


def _repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """main: a base, then upstream edits; branch fork: the fork's edits on the base."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name in ("a.txt", "b.txt", "c.txt"):
        (repo / name).write_text(LINES)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    shas: dict[str, str] = {}
    git(repo, "checkout", "-q", "-b", "fork")
    for name, old, new in (("a.txt", "line 10\n", "line 10 fork\n"), ("b.txt", "line 5\n", "line 5 fork\n"),
                           ("c.txt", "line 15\n", "line 15 fork\n")):  # fmt: skip
        (repo / name).write_text(LINES.replace(old, new))
        git(repo, "commit", "-q", "-am", f"fork {name}")
        shas[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    # a: upstream edits line 12 (inside the fork hunk's context); b: line 5 itself; c: untouched.
    (repo / "a.txt").write_text(LINES.replace("line 12\n", "line 12 upstream\n"))
    (repo / "b.txt").write_text(LINES.replace("line 5\n", "line 5 upstream\n"))
    git(repo, "commit", "-q", "-am", "upstream")
    shas["baseline"] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def test_a_nearby_change_merges_and_a_true_conflict_does_not(tmp_path: Path) -> None:
    path, shas = _repo(tmp_path)
    repo = gitrepo.open_repo(path)
    diffs = {name: git(path, "show", "--format=", shas[name]) + "\n" for name in ("a.txt", "b.txt", "c.txt")}
    assert gitrepo.apply_check(repo, shas["baseline"], diffs["a.txt"]) is not None

    merged = gitrepo.three_way(repo, shas["baseline"], diffs["a.txt"], commit=shas["a.txt"])
    assert merged.conflicts == [] and merged.diff is not None
    assert gitrepo.apply_check(repo, shas["baseline"], merged.diff) is None
    head = gitrepo.commit_patch(repo, shas["baseline"], merged.diff, "rebased")
    text = gitrepo.show_file(repo, head, "a.txt") or ""
    assert "line 10 fork\n" in text and "line 12 upstream\n" in text

    conflict = gitrepo.three_way(repo, shas["baseline"], diffs["b.txt"], commit=shas["b.txt"])
    assert conflict.diff is None and conflict.conflicts == ["b.txt"]
    assert "with conflicts" in conflict.error or "conflict" in conflict.error.lower()
    # Without the commit (only the stored diff): the preimage blob named in the diff is used.
    again = gitrepo.three_way(repo, shas["baseline"], diffs["a.txt"])
    assert again.diff == merged.diff
    # The repository's own index and work tree are left alone (a throw-away index did the work).
    assert git(path, "status", "--porcelain") == "" and git(path, "rev-parse", "HEAD") == shas["baseline"]


def test_many_diffs_are_checked_together_with_the_verdicts_of_one_by_one(tmp_path: Path) -> None:
    path, shas = _repo(tmp_path)
    repo = gitrepo.open_repo(path)
    diffs = [git(path, "show", "--format=", shas[name]) + "\n" for name in ("a.txt", "b.txt", "c.txt")]
    new_file = (
        "diff --git a/d.txt b/d.txt\nnew file mode 100644\n--- /dev/null\n+++ b/d.txt\n@@ -0,0 +1 @@\n+d\n"
    )
    exists = (
        "diff --git a/a.txt b/a.txt\nnew file mode 100644\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"
    )
    missing = "--- a/zz.txt\n+++ b/zz.txt\n@@ -1 +1 @@\n-x\n+y\n"
    corrupt = "--- a/c.txt\n+++ b/c.txt\n@@ -1,2 +1,2 @@\n garbage\n"
    cases = [*diffs, new_file, exists, missing, corrupt]
    paths = [["a.txt"], ["b.txt"], ["c.txt"], ["d.txt"], ["a.txt"], ["zz.txt"], ["c.txt"]]
    together = gitrepo.apply_check_many(repo, shas["baseline"], list(zip(cases, paths, strict=True)))
    alone = [gitrepo.apply_check(repo, shas["baseline"], d) for d in cases]
    assert [e is None for e in together] == [e is None for e in alone] == [False, False, True, True, False,
                                                                            False, False]  # fmt: skip
    assert together == alone  # the same error text, also after a corrupt diff spoilt its batch
