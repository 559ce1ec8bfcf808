"""Fork mining on real repositories: an upstream, a fork with commits, one already upstreamed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kb.db import rows
from kb.errors import UserError
from kb.forks import add_fork, list_commits, list_forks, parse_log
from kb.search import get_evidence, search
from kb.workspace import Workspace
from tests.kb.helpers import ForkRepos, GitRepo, db_dump, set_kb_settings


def mirror_refs(ws: Workspace) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(ws.mirror_path), "for-each-ref", "--format=%(refname)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(out.split())


def commit_rows(ws: Workspace) -> dict[str, dict[str, object]]:
    found = rows(
        ws.db(),
        "SELECT c.*, e.title, e.section, e.body, e.meta FROM commits c "
        "JOIN evidence e ON e.id = c.evidence_id",
    )
    return {str(r["sha"]): r for r in found}


def test_fork_only_commits_are_recorded(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    ws = set_kb_settings(fork_ws, max_file_diff_bytes=20_000, max_commit_diff_bytes=50_000)
    result = add_fork(ws, ws.db(), "ik", str(fork_repos.fork.path))
    shas = fork_repos.shas
    assert result.status == "added"
    assert (result.new_commits, result.commits, result.upstreamed) == (5, 5, 1)
    assert result.merge_base == fork_repos.fork_point
    assert result.head == fork_repos.fork.head()
    assert "refs/forks/ik/main" in mirror_refs(ws)
    assert not [r for r in mirror_refs(ws) if "autoresearch-tmp" in r]

    found = commit_rows(ws)
    assert set(found) == set(shas.values())
    fuse = found[shas["fuse"]]
    assert fuse["subject"] == "ggml-cpu: fuse RMS_NORM and MUL"
    assert fuse["message"] == (
        "ggml-cpu: fuse RMS_NORM and MUL\n\nSaves a pass over the activations: +3% tg on "
        "AVX2.\nSecond line of the body.\n"
    )
    assert fuse["author"] == "Fork Author <fork@example.invalid>"
    assert str(fuse["authored_at"]).startswith("2026-01-01T")
    assert json.loads(str(fuse["files"])) == ["ggml/src/ggml-cpu/ops.c"]
    assert (fuse["insertions"], fuse["deletions"]) == (1, 0)
    assert str(fuse["diff"]).startswith("diff --git a/ggml/src/ggml-cpu/ops.c b/ggml/src/ggml-cpu/ops.c")
    assert "+bool fused(void) { return ggml_can_fuse(cgraph, i, 2); }" in str(fuse["diff"])
    assert fuse["upstreamed"] == 0 and fuse["diff_truncated"] == 0 and len(str(fuse["patch_id"])) == 40
    assert fuse["title"] == fuse["subject"] and fuse["section"] == "ik"
    # The evidence body makes the commit searchable by message, files and changed code.
    for term in ("activations", "ggml/src/ggml-cpu/ops.c", "ggml_can_fuse"):
        assert str(fuse["body"]).count(term) >= 1, term

    assert found[shas["shared"]]["upstreamed"] == 1  # cherry-picked upstream under another sha
    assert sum(int(str(r["upstreamed"])) for r in found.values()) == 1

    binary = found[shas["binary"]]
    assert json.loads(str(binary["binary_files"])) == ["models/tiny.bin"]
    assert "Binary files /dev/null and b/models/tiny.bin differ" in str(binary["diff"])
    assert json.loads(str(binary["meta"]))["binary_files"] == ["models/tiny.bin"]

    huge = found[shas["huge"]]
    assert huge["diff_truncated"] == 1 and huge["insertions"] == 8000
    assert len(str(huge["diff"])) < 21_000
    assert "[diff of ggml/src/ggml-cpu/table.c cut at 20,000 bytes]" in str(huge["diff"])
    assert json.loads(str(huge["meta"]))["truncated_files"] == ["ggml/src/ggml-cpu/table.c"]

    files = rows(ws.db(), "SELECT path FROM commit_files ORDER BY path")
    assert [f["path"] for f in files] == [
        "docs/fork.md",
        "ggml/include/vec.h",
        "ggml/src/ggml-cpu/ops.c",
        "ggml/src/ggml-cpu/table.c",
        "models/tiny.bin",
    ]


def test_commits_are_searchable_and_shown(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    hits = search(db, "ggml_can_fuse", kind="commit")
    assert [h.ref for h in hits] == [fork_repos.shas["fuse"]]
    assert hits[0].kind == "commit" and hits[0].title == "ggml-cpu: fuse RMS_NORM and MUL"
    assert search(db, "ggml_can_fuse", kind="paper") == []
    item = get_evidence(db, hits[0].id)
    assert item.commit is not None and item.commit["sha"] == fork_repos.shas["fuse"]
    assert item.files == ["ggml/src/ggml-cpu/ops.c"] and item.commit["upstreamed"] is False
    assert item.source["name"] == "ik"


def test_listing_and_path_filter(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    (fork,) = list_forks(db)
    assert (fork.name, fork.branch, fork.commits, fork.upstreamed) == ("ik", "main", 5, 1)
    every = list_commits(db, "ik")
    assert [c.sha for c in every] == list(fork_repos.shas.values())  # oldest first
    cpu = list_commits(db, "ik", "ggml/src/ggml-cpu/")
    assert [c.sha for c in cpu] == [fork_repos.shas["fuse"], fork_repos.shas["huge"]]
    assert [c.sha for c in list_commits(db, "ik", "./ggml/src/ggml-cpu")] == [c.sha for c in cpu]
    assert list_commits(db, "ik", "ggml/src/ggml-c") == []  # a folder name prefix is not the folder
    assert [c.sha for c in list_commits(db, "ik", "ggml/include/vec.h")] == [fork_repos.shas["shared"]]
    assert [c.upstreamed for c in list_commits(db, "ik", "ggml/include")] == [True]
    with pytest.raises(UserError, match="nope: no such fork"):
        list_commits(db, "nope")
    with pytest.raises(UserError, match="nope: no such fork"):
        list_forks(db, "nope")


def test_refresh_is_incremental(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    ids_before = {r["ref"]: r["id"] for r in rows(db, "SELECT id, ref FROM evidence WHERE kind = 'commit'")}
    unchanged = add_fork(fork_ws, db, "ik")
    assert (
        unchanged.status == "unchanged" and unchanged.new_commits == 0 and "up to date" in unchanged.message
    )
    new = fork_repos.fork.commit(
        "ggml-cpu: prefetch next block", {"ggml/src/ggml-cpu/prefetch.c": "int p;\n"}
    )
    refreshed = add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    assert refreshed.status == "refreshed"
    assert (refreshed.new_commits, refreshed.commits) == (1, 6)
    ids_after = {r["ref"]: r["id"] for r in rows(db, "SELECT id, ref FROM evidence WHERE kind = 'commit'")}
    assert {k: v for k, v in ids_after.items() if k != new} == ids_before  # old evidence ids stay citable
    assert new in ids_after
    assert (
        subprocess.run(
            ["git", "--git-dir", str(fork_ws.mirror_path), "rev-parse", "refs/forks/ik/main"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        == new
    )


def test_force_pushed_fork_keeps_old_commits(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    fork_repos.fork.git("reset", "-q", "--hard", fork_repos.shas["binary"])
    rewritten = fork_repos.fork.commit("ggml-cpu: rewritten table", {"ggml/src/ggml-cpu/t2.c": "int t;\n"})
    result = add_fork(fork_ws, db, "ik")
    assert result.new_commits == 1 and result.commits == 6
    assert rewritten in commit_rows(fork_ws)


def test_several_forks_and_branches(fork_ws: Workspace, fork_repos: ForkRepos, tmp_path: Path) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    other = GitRepo.clone(fork_repos.upstream, tmp_path / "other")
    other.git("checkout", "-q", "-b", "experiments")
    other.commit("metal: tune threadgroups", {"ggml/src/ggml-metal/k.metal": "kernel void k() {}\n"})
    second = add_fork(fork_ws, db, "llamafile", str(other.path), branch="experiments")
    assert (second.new_commits, second.upstreamed) == (1, 0)
    assert [f.name for f in list_forks(db)] == ["ik", "llamafile"]
    assert [f.branch for f in list_forks(db, "llamafile")] == ["experiments"]
    assert "refs/forks/llamafile/experiments" in mirror_refs(fork_ws)
    # The same repository and branch under another name is refused.
    with pytest.raises(UserError, match="already recorded as fork ik"):
        add_fork(fork_ws, db, "ik2", str(fork_repos.fork.path))


def test_non_ascii_and_spaced_paths(fork_ws: Workspace, fork_repos: ForkRepos) -> None:
    fork_repos.fork.commit(
        "docs: ядро and spaces",
        {"docs/ядро.md": "текст\n", "docs/with space.md": "x\n", 'docs/quote"tab\t.md': "y\n"},
    )
    add_fork(fork_ws, fork_ws.db(), "ik", str(fork_repos.fork.path))
    (commit,) = [c for c in list_commits(fork_ws.db(), "ik") if c.subject.startswith("docs: ядро")]
    assert sorted(commit.files) == ['docs/quote"tab\t.md', "docs/with space.md", "docs/ядро.md"]


def test_parse_log_streams_batched_output() -> None:
    sep, rec = b"\x1f", b"\x1e"
    lines = [
        rec
        + b"a" * 40
        + sep
        + b"Ann"
        + sep
        + b"a@x"
        + sep
        + b"2026-01-01T00:00:00+00:00"
        + sep
        + b"Subject"
        + sep
        + b"Body line 1\n",
        b"Body line 2\n",
        sep + b"\n",
        b"\n",
        b"3\t1\tsrc/a.c\n",
        b"-\t-\tlogo.png\n",
        b"\n",
        b"diff --git a/src/a.c b/src/a.c\n",
        b"+" + b"y" * 100 + b"\n",
        b"diff --git a/logo.png b/logo.png\n",
        b"Binary files a/logo.png and b/logo.png differ\n",
        rec
        + b"b" * 40
        + sep
        + b"Bob"
        + sep
        + b"b@x"
        + sep
        + b"2026-01-02T00:00:00+00:00"
        + sep
        + b"Empty"
        + sep
        + sep
        + b"\n",
    ]
    first, second = parse_log(lines, per_file=90, per_commit=10_000)
    assert (first.sha, first.author, first.subject, first.body) == (
        "a" * 40,
        "Ann",
        "Subject",
        "Body line 1\nBody line 2",
    )
    assert first.files == ["src/a.c", "logo.png"] and first.binary_files == ["logo.png"]
    assert (first.insertions, first.deletions) == (3, 1)
    assert first.diff_truncated and first.truncated_files == ["src/a.c"]
    assert "Binary files a/logo.png and b/logo.png differ" in first.diff
    assert (second.sha, second.subject, second.files, second.diff) == ("b" * 40, "Empty", [], "")


# --- bad input: one line naming the input and the reason; database and mirror unchanged -------------


def _assert_refused(ws: Workspace, call: object, message: str) -> None:
    before = db_dump(ws.db_path)
    refs = mirror_refs(ws)
    with pytest.raises(UserError, match=message) as info:
        call()  # type: ignore[operator]
    assert "\n" not in str(info.value)
    assert db_dump(ws.db_path) == before
    assert mirror_refs(ws) == refs


def test_bad_fork_input(fork_ws: Workspace, fork_repos: ForkRepos, tmp_path: Path) -> None:
    db = fork_ws.db()
    plain = tmp_path / "plain"
    plain.mkdir()
    unrelated = GitRepo.init(tmp_path / "unrelated")
    unrelated.commit("Another project", {"main.c": "int main(void) { return 0; }\n"})
    fork = str(fork_repos.fork.path)
    _assert_refused(fork_ws, lambda: add_fork(fork_ws, db, "x", str(plain)), f"{plain}: not a git repository")
    _assert_refused(fork_ws, lambda: add_fork(fork_ws, db, "x", str(tmp_path / "gone")), "no such folder")
    _assert_refused(
        fork_ws,
        lambda: add_fork(fork_ws, db, "x", fork, fork_point="no-such-commit"),
        "fork point no-such-commit: not a commit of the fork's branch",
    )
    _assert_refused(
        fork_ws,
        lambda: add_fork(fork_ws, db, "x", fork, branch="no-such-branch"),
        f"{fork}: unknown branch 'no-such-branch' \\(branches: main\\)",
    )
    _assert_refused(fork_ws, lambda: add_fork(fork_ws, db, "bad/name", fork), "bad/name: invalid fork name")
    _assert_refused(fork_ws, lambda: add_fork(fork_ws, db, "x"), "x: no such fork")
    _assert_refused(
        fork_ws,
        lambda: add_fork(fork_ws, db, "x", "http://127.0.0.1:9/nothing.git"),
        "http://127.0.0.1:9/nothing.git: cannot read the repository",
    )
    add_fork(fork_ws, db, "ik", fork)
    _assert_refused(
        fork_ws,
        lambda: add_fork(fork_ws, db, "ik", str(unrelated.path)),
        "ik: already a fork of .*; choose another name",
    )
    _assert_refused(
        fork_ws, lambda: add_fork(fork_ws, db, "ik", fork, branch="dev"), "ik: already follows branch main"
    )


def test_refresh_updates_upstreamed_when_the_baseline_moves(
    fork_ws: Workspace, fork_repos: ForkRepos
) -> None:
    from kb.config import dump_settings, load_settings

    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    assert not commit_rows(fork_ws)[fork_repos.shas["docs"]]["upstreamed"]
    upstream = fork_repos.upstream
    upstream.git("fetch", "-q", str(fork_repos.fork.path), "main:fork-main")
    new_baseline = upstream.cherry_pick(fork_repos.shas["docs"])
    subprocess.run(
        ["git", "--git-dir", str(fork_ws.mirror_path), "fetch", "-q", str(upstream.path), "+main:main"],
        check=True,
    )
    settings = load_settings(fork_ws.config_path)
    target = settings.target.model_copy(update={"baseline_commit": new_baseline})
    fork_ws.config_path.write_text(dump_settings(settings.model_copy(update={"target": target})))
    ws = Workspace(fork_ws.root)
    fork_repos.fork.commit("ggml-cpu: one more", {"ggml/src/ggml-cpu/more.c": "int more;\n"})
    result = add_fork(ws, ws.db(), "ik")
    assert (result.new_commits, result.upstreamed) == (1, 2)
    assert commit_rows(ws)[fork_repos.shas["docs"]]["upstreamed"] == 1
