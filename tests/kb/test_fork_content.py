"""Forks that share no commit with the target, on repositories the tests build: a fork whose every
commit was rewritten (ik_llama.cpp), a fork with no close tree (file-level mode), a single-commit
target (the recipe's sdist tree), given and suggested fork points, and what is recorded per commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kb.config import ForkSuggestion, dump_settings, load_settings
from kb.db import insert, rows, transaction
from kb.errors import UserError
from kb.forks import add_fork, list_commits, list_forks
from kb.init import TargetSpec, create_workspace
from kb.search import search
from kb.workspace import Workspace
from tests.kb.helpers import GitRepo, rewritten_copy, set_target_settings

OPS = "\n".join(f"void op_{i}(float * x) {{ x[{i}] += {i}; }}" for i in range(40)) + "\n"


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _commits(ws: Workspace) -> dict[str, dict[str, object]]:
    found = rows(
        ws.db(), "SELECT c.*, e.meta AS emeta FROM commits c JOIN evidence e ON e.id = c.evidence_id"
    )
    return {str(r["sha"]): r for r in found}


def _workspace(tmp_path: Path, target: GitRepo, name: str = "ws") -> Workspace:
    return create_workspace(tmp_path / name, TargetSpec(location=str(target.path)))


# --- a fork whose every commit was rewritten --------------------------------------------------------


class Rewritten:
    """Upstream u1..u3 (fork point), then u4 (unrelated), u5 (cherry-pick of the fork's `vec` change),
    u6 (empty). The fork: rewritten copies of u1..u3, then `fuse` (CPU kernel, claims +30% PP), `vec`,
    `docs`, `empty` (no change)."""

    def __init__(self, root: Path) -> None:
        up = GitRepo.init(root / "upstream")
        up.commit("Initial import", {"ggml/src/ggml-cpu/ops.c": OPS, "ggml/include/vec.h": "#define W 4\n"})
        up.commit("Add docs", {"docs/build.md": "how to build\n"})
        self.fork_point = up.commit("ggml-cpu: tidy", {"ggml/src/ggml-cpu/ops.c": OPS + "// tidy\n"})
        fork, copies = rewritten_copy(up, root / "fork", self.fork_point)
        self.copies = copies
        self.fuse = fork.commit(
            "ggml-cpu: fuse RMS_NORM and MUL\n\nThis gives 30% faster PP on AVX2.",
            {
                "ggml/src/ggml-cpu/ops.c": OPS
                + "// tidy\nbool fused(void) { return ggml_can_fuse(g, i, 2); }\n"
            },
        )
        self.vec = fork.commit("vec: widen W", {"ggml/include/vec.h": "#define W 8\n"})
        self.docs = fork.commit("docs: explain the fork", {"docs/fork.md": "this fork fuses kernels\n"})
        self.empty = fork.commit("Empty marker")
        up.commit("Unrelated upstream change", {"README.md": "target\n"})
        up.git("fetch", "-q", str(fork.path), "main:fork-main")
        self.picked = up.cherry_pick(self.vec)
        up.git("branch", "-q", "-D", "fork-main")
        up.commit("Upstream empty marker")
        self.upstream, self.fork = up, fork


@pytest.fixture
def rewritten(tmp_path: Path) -> Rewritten:
    return Rewritten(tmp_path / "repos")


def test_rewritten_fork_is_mined_from_the_newest_identical_tree(rewritten: Rewritten, tmp_path: Path) -> None:
    ws = _workspace(tmp_path, rewritten.upstream)
    # The histories share no commit: the old code refused with "no history in common".
    assert _git(ws.mirror_path, "rev-list", "--all").count(rewritten.copies[rewritten.fork_point]) == 0
    url = f"file://{rewritten.fork.path}"  # a URL as well as a path: nothing leaves the machine
    result = add_fork(ws, ws.db(), "ik", url)
    copy_of_point = rewritten.copies[rewritten.fork_point]
    assert result.fork_point["method"] == "identical-tree"
    assert result.fork_point["fork"] == copy_of_point
    assert result.merge_base == rewritten.fork_point  # recorded on the source row
    assert "has the tree of target commit" in result.message

    # Fork-only: exactly `git rev-list` after the fork point, merges left out; the rewritten
    # copies of upstream commits are upstream's, not the fork's.
    expected = _git(
        ws.mirror_path, "rev-list", "--no-merges", "refs/forks/ik/main", f"^{copy_of_point}"
    ).split()
    found = _commits(ws)
    assert set(found) == set(expected) == {rewritten.fuse, rewritten.vec, rewritten.docs, rewritten.empty}
    assert (result.commits, result.new_commits) == (4, 4)

    # Upstreamed as `git cherry` says, with the fork point grafted by hand in a scratch copy.
    scratch = tmp_path / "graft.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(ws.mirror_path), str(scratch)], check=True)
    _git(scratch, "replace", copy_of_point, rewritten.fork_point)
    cherry = _git(scratch, "cherry", "main", "refs/forks/ik/main").splitlines()
    marked = {line[2:] for line in cherry if line.startswith("- ")} - {copy_of_point}
    assert {sha for sha, r in found.items() if r["upstreamed"]} == marked == {rewritten.vec, rewritten.empty}
    assert result.upstreamed == 2

    source = rows(ws.db(), "SELECT merge_base, meta FROM sources WHERE kind = 'fork'")[0]
    meta = json.loads(str(source["meta"]))
    assert meta["fork_point"]["method"] == "identical-tree" and source["merge_base"] == rewritten.fork_point


def test_what_each_commit_records_for_the_queue(rewritten: Rewritten, tmp_path: Path) -> None:
    ws = _workspace(tmp_path, rewritten.upstream)
    add_fork(ws, ws.db(), "ik", str(rewritten.fork.path))
    by_sha = {c.sha: c for c in list_commits(ws.db(), "ik")}
    fuse = by_sha[rewritten.fuse]
    assert fuse.backends == ["cpu"] and fuse.areas == ["backend"]
    assert [(c["effect"], c["metric"], c["how"]) for c in fuse.claims] == [(0.3, "pp", "text")]
    assert by_sha[rewritten.docs].areas == ["docs"] and by_sha[rewritten.docs].backends == []
    assert by_sha[rewritten.vec].areas == ["core"]
    # The commit's result is already the baseline's file (cherry-picked upstream): 1 of its 1 files.
    assert json.loads(str(_commits(ws)[rewritten.vec]["emeta"]))["files_in_baseline"] == 1


def test_refresh_after_a_rewritten_fork_moves_mines_only_new_commits(
    rewritten: Rewritten, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path, rewritten.upstream)
    db = ws.db()
    add_fork(ws, db, "ik", str(rewritten.fork.path))
    ids = {r["ref"]: r["id"] for r in rows(db, "SELECT id, ref FROM evidence WHERE kind = 'commit'")}
    assert add_fork(ws, db, "ik").status == "unchanged"
    new = rewritten.fork.commit("ggml-cpu: prefetch", {"ggml/src/ggml-cpu/prefetch.c": "int p;\n"})
    result = add_fork(ws, db, "ik")
    assert (result.status, result.new_commits, result.commits) == ("refreshed", 1, 5)
    after = {r["ref"]: r["id"] for r in rows(db, "SELECT id, ref FROM evidence WHERE kind = 'commit'")}
    assert {k: v for k, v in after.items() if k != new} == ids  # old evidence ids stay citable


def test_a_fork_that_resyncs_to_upstream_forks_again_from_there(rewritten: Rewritten, tmp_path: Path) -> None:
    """The newest identical pair wins: a fork commit reset to a later upstream tree is the new fork
    point, and what came before it is not the fork's own work any more."""
    fork, up = rewritten.fork, rewritten.upstream
    synced_tree = up.git("rev-parse", f"{up.head()}^{{tree}}")
    fork.git("fetch", "-q", str(up.path), "main:upstream-main")
    resync = fork.git("commit-tree", synced_tree, "-p", fork.head(), "-m", "Sync with upstream")
    fork.git("reset", "-q", "--hard", resync)
    after = fork.commit("ggml-cpu: after the sync", {"ggml/src/ggml-cpu/late.c": "int late;\n"})
    fork.git("branch", "-q", "-D", "upstream-main")
    ws = _workspace(tmp_path, up)
    result = add_fork(ws, ws.db(), "ik", str(fork.path))
    assert result.fork_point["method"] == "identical-tree"
    assert result.fork_point["fork"] == resync and result.merge_base == up.head()
    assert set(_commits(ws)) == {after}


# --- no close tree: file-level mode -----------------------------------------------------------------


def _file_level_repos(root: Path) -> tuple[GitRepo, GitRepo]:
    up = GitRepo.init(root / "upstream")
    up.commit(
        "Initial import",
        {
            "ggml/src/ggml-cpu/ops.c": OPS,
            "ggml/src/ggml-metal/metal.m": "kernel void k() {}\n",
            "src/llama.cpp": "int llama(void) { return 1; }\n",
            "src/other.cpp": "int other(void) { return 2; }\n",
            "README.md": "target\n",
        },
    )
    fork = GitRepo.init(root / "fork")  # unrelated history, another project's files around
    fork.commit("Start", {"main.c": "int main(void) { return 0; }\n", "ggml/src/ggml-cpu/ops.c": "int x;\n"})
    fork.commit(
        "Port the kernels",
        {
            "ggml/src/ggml-cpu/ops.c": OPS.replace("x[3] += 3", "x[3] *= 3"),
            "ggml/src/ggml-cpu/iqk_gemm.c": "void iqk_mul_mat_avx2(void) { /* repacked tiles */ }\n",
            "src/llama.cpp": "int llama(void) { return 42; }\n",
        },
    )
    return up, fork


def test_a_fork_with_no_close_tree_is_compared_file_by_file(tmp_path: Path) -> None:
    up, fork = _file_level_repos(tmp_path / "repos")
    ws = set_target_settings(
        _workspace(tmp_path, up), paths_of_interest=["ggml/src/ggml-cpu/", "ggml/src/ggml-metal/", "src/"]
    )
    db = ws.db()
    result = add_fork(ws, db, "far", str(fork.path))
    assert result.fork_point["method"] == "file-level" and result.fork_point["fork"] is None
    assert result.fork_point["nearest"] == fork.head()
    assert (result.commits, result.files) == (0, 4)
    assert "no fork point" in result.message and "compared file by file: 4 files differ" in result.message
    found = {r["path"]: r for r in rows(db, "SELECT * FROM fork_files")}
    assert {p: r["status"] for p, r in found.items()} == {
        "ggml/src/ggml-cpu/ops.c": "modified",
        "ggml/src/ggml-cpu/iqk_gemm.c": "added",
        "src/llama.cpp": "modified",
        "src/other.cpp": "deleted",
    }  # ggml-metal/ is absent from the fork's layout: not "deleted by the fork"
    ops = found["ggml/src/ggml-cpu/ops.c"]
    assert (ops["insertions"], ops["deletions"], ops["backend"]) == (1, 1, "cpu")
    assert "-void op_3(float * x) { x[3] += 3; }" in str(
        ops["diff"]
    ) and "+void op_3(float * x) { x[3] *= 3; }" in str(ops["diff"])
    assert found["ggml/src/ggml-cpu/iqk_gemm.c"]["baseline_blob"] is None
    hits = search(db, "iqk_mul_mat_avx2", kind="commit")
    assert [h.evidence_kind for h in hits] == ["fork_file"] and hits[0].ref == "ggml/src/ggml-cpu/iqk_gemm.c"
    (listed,) = list_forks(db)
    assert (listed.files, listed.fork_point["method"]) == (4, "file-level")

    # Refresh: rows keep their ids; a file that no longer differs goes, unless something cites it.
    ids = {r["ref"]: r["id"] for r in rows(db, "SELECT id, ref FROM evidence WHERE kind = 'fork_file'")}
    with transaction(db):
        hid = insert(db, "hypotheses", {"title": "port ops", "created_at": 1.0, "updated_at": 1.0})
        insert(
            db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": ids["ggml/src/ggml-cpu/ops.c"]}
        )
    fork.commit(
        "Follow upstream again",
        {"ggml/src/ggml-cpu/ops.c": OPS, "src/llama.cpp": "int llama(void) { return 1; }\n",
         "ggml/src/ggml-cpu/iqk_gemm.c": "void iqk_mul_mat_avx2(void) { /* v2 */ }\n"},
    )  # fmt: skip
    again = add_fork(ws, db, "far")
    assert again.status == "refreshed" and again.files == 3
    after = {r["ref"]: r for r in rows(db, "SELECT id, ref, meta FROM evidence WHERE kind = 'fork_file'")}
    assert "src/llama.cpp" not in after
    assert after["ggml/src/ggml-cpu/iqk_gemm.c"]["id"] == ids["ggml/src/ggml-cpu/iqk_gemm.c"]
    assert json.loads(str(after["ggml/src/ggml-cpu/ops.c"]["meta"]))["stale"] is True


# --- a single-commit target (the recipe's sdist tree) -----------------------------------------------


def _single_commit_repos(root: Path) -> tuple[GitRepo, GitRepo, dict[str, str]]:
    """The target: one commit. The fork: a history whose commit `close` has the target's files under
    the paths of interest but one, with other files around that differ."""
    cpu = {f"ggml/src/ggml-cpu/k{i}.c": f"int k{i} = {i};\n" for i in range(9)}
    target = GitRepo.init(root / "sdist")
    target.commit(
        "llama.cpp as vendored", {**cpu, "ggml/src/ggml-cpu/k9.c": "int k9 = 99;\n", "README.md": "sdist\n"}
    )
    fork = GitRepo.init(root / "fork")
    shas = {"old": fork.commit("Old import", {"ggml/src/ggml-cpu/k0.c": "int k0;\n", "README.md": "fork\n"})}
    shas["close"] = fork.commit("Sync the kernels", {**cpu, "ggml/src/ggml-cpu/k9.c": "int k9 = 9;\n"})
    shas["rewrite"] = fork.commit(
        "ggml-cpu: new kernels", {p: f"int rewritten_{i};\n" for i, p in enumerate(sorted(cpu))}
    )
    shas["more"] = fork.commit("ggml-cpu: more", {"ggml/src/ggml-cpu/k10.c": "int k10;\n"})
    return target, fork, shas


def test_single_commit_target_forks_at_the_closest_fork_commit(tmp_path: Path) -> None:
    target, fork, shas = _single_commit_repos(tmp_path / "repos")
    ws = set_target_settings(_workspace(tmp_path, target), paths_of_interest=["ggml/src/ggml-cpu/"])
    assert _git(ws.mirror_path, "rev-list", "--count", "HEAD") == "1"
    result = add_fork(ws, ws.db(), "ik", str(fork.path))
    point = result.fork_point
    assert (point["method"], point["fork"], point["differing"], point["total"]) == (
        "closest-tree",
        shas["close"],
        1,
        10,
    )
    assert "1 of 10 files differ under the paths of interest" in result.message
    assert set(_commits(ws)) == {shas["rewrite"], shas["more"]} and result.files == 0


def test_given_and_suggested_fork_points(tmp_path: Path) -> None:
    target, fork, shas = _single_commit_repos(tmp_path / "repos")
    ws = set_target_settings(_workspace(tmp_path, target), paths_of_interest=["ggml/src/ggml-cpu/"])
    given = add_fork(ws, ws.db(), "ik", str(fork.path), fork_point=shas["rewrite"])
    # Far from the target (every kernel rewritten): mined from there, and compared file by file too.
    assert given.fork_point["method"] == "given" and given.fork_point["close"] is False
    assert set(_commits(ws)) == {shas["more"]} and given.files == 11
    assert add_fork(ws, ws.db(), "ik").status == "unchanged"  # the given point is remembered

    # A fork the config suggests ([reading] forks, as the recipe writes them): no location needed.
    settings = load_settings(ws.config_path)
    suggestions = [
        ForkSuggestion(name="near", url=str(fork.path), branch="main", fork_point=shas["close"]),
        ForkSuggestion(name="moved", url=str(fork.path), fork_point="0" * 40),
    ]
    reading = settings.reading.model_copy(update={"forks": suggestions})
    ws.config_path.write_text(
        dump_settings(settings.model_copy(update={"reading": reading})), encoding="utf-8"
    )
    ws = Workspace(ws.root)
    with pytest.raises(UserError, match="already recorded as fork ik"):
        add_fork(ws, ws.db(), "near")
    subprocess.run(["git", "-C", str(fork.path), "branch", "-q", "other"], check=True)
    moved = add_fork(ws, ws.db(), "moved", branch="other")
    # A suggested fork point the fork does not have (a force-push since): found by content, said so.
    assert (
        moved.fork_point["method"] == "closest-tree"
        and "is not in the fork; found by content" in moved.message
    )


def test_a_bad_fork_point_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    target, fork, shas = _single_commit_repos(tmp_path / "repos")
    ws = _workspace(tmp_path, target)
    other = GitRepo.init(tmp_path / "other")
    stranger = other.commit("Not in the fork", {"x.c": "int x;\n"})
    with pytest.raises(UserError, match=f"fork point {stranger[:12]}: not a commit of the fork's branch"):
        add_fork(ws, ws.db(), "ik", str(fork.path), fork_point=stranger[:12])
    assert list_forks(ws.db()) == []


def test_the_recipe_reads_ik_llama_cpp_out_of_the_box(tmp_path: Path) -> None:
    """The llama.cpp recipe's config: ik's CPU kernels are paths of interest, and ik_llama.cpp is a
    suggested fork with its fork point, so `kb add-fork ik_llama.cpp` needs nothing more."""
    import tomllib

    from kb.config import parse_settings
    from runner.recipes import llamacpp

    data = llamacpp.settings_overrides(tmp_path / "model.gguf")
    data["target"]["path"] = str(tmp_path)
    settings = parse_settings(data, "recipe")
    assert {"ggml/src/iqk/", "ggml/src/ggml.c", "ggml/src/ggml-cpu/"} <= set(
        settings.target.paths_of_interest
    )
    ik = next(f for f in settings.reading.forks if f.name == "ik_llama.cpp")
    assert (ik.branch, ik.fork_point) == ("main", llamacpp.IK_FORK_POINT)
    assert parse_settings(tomllib.loads(dump_settings(settings)), "round trip") == settings  # the toml
