"""Protected paths are refused before anything runs; trees are real worktrees of the mirror."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kb import gitrepo
from kb.init import TargetSpec, create_workspace
from kb.workspace import Workspace
from runner.harness.prepare import (
    DoesNotApply,
    commit_candidate,
    prepare_workdir,
    protected_paths,
    refusal,
    remove_workdir,
    resolve_scripts,
)
from tests.runner.runner_target import make_diff, make_target, stale_diff, workspace_settings


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return make_target(tmp_path / "target")


def make_ws(tmp_path: Path, repo: Path, **extra: dict[str, object]) -> Workspace:
    return create_workspace(
        tmp_path / "ws",
        TargetSpec(
            location=str(repo), protect=["Makefile", "cfg/", "*.mk"], extra=workspace_settings(**extra)
        ),
    )


def test_refusal_names_the_protected_path_and_why(tmp_path: Path, target: Path) -> None:
    ws = make_ws(tmp_path, target, fleet={"template": "tpl/experiment.yaml"})
    protected = protected_paths(ws, ws.settings)
    assert refusal(["prog.c"], protected) is None
    assert refusal(["src/prog.c", "docs/x.md"], protected) is None
    cases = {
        "autoresearch.sh": "the benchmark script",
        "autoresearch.checks.sh": "the checks script",
        "Makefile": "listed in target.protect",
        "cfg/flags.txt": "listed in target.protect",
        "build/rules.mk": "listed in target.protect",
        "autoresearch.toml": "the workspace configuration",
        "tpl/experiment.yaml": "the experiment template",
        "runner/harness/experiment.yaml": "the experiment template",
    }
    for path, why in cases.items():
        reason = refusal(["prog.c", path], protected)
        assert reason is not None and path in reason and why in reason, (path, reason)
    assert refusal(["./autoresearch.sh"], protected) is not None


def test_scripts_come_from_the_workspace_when_it_has_them(tmp_path: Path, target: Path) -> None:
    ws = make_ws(tmp_path, target)
    scripts = resolve_scripts(ws, ws.settings)
    assert scripts.bench.source is None and scripts.bench.path == "autoresearch.sh"
    (ws.root / "autoresearch.checks.sh").write_text("#!/bin/sh\necho workspace checks\n")
    scripts = resolve_scripts(ws, ws.settings)
    assert scripts.checks.source == ws.root / "autoresearch.checks.sh"


def test_prepare_checks_out_both_trees_and_places_the_scripts(tmp_path: Path, target: Path) -> None:
    ws = make_ws(tmp_path, target)
    (ws.root / "autoresearch.checks.sh").write_text("#!/bin/sh\necho workspace checks\n")
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    candidate = commit_candidate(repo, baseline, make_diff(target, "speedup"), "Skip the warm-up")
    assert gitrepo.run(repo, "rev-parse", f"{candidate}^").strip() == baseline
    workdir = ws.worktrees_dir / "run1" / "exp1"
    for _ in range(2):  # a second call replaces what a killed runner left behind
        prepare_workdir(repo, workdir, baseline, candidate, resolve_scripts(ws, ws.settings))
    a, b = workdir / "a", workdir / "b"
    assert "return 9 * n_iter;" in (a / "prog.c").read_text()
    assert "return 0;" in (b / "prog.c").read_text()
    for tree in (a, b):
        checks = tree / "autoresearch.checks.sh"
        assert checks.read_text() == "#!/bin/sh\necho workspace checks\n"
        assert not checks.stat().st_mode & stat.S_IWUSR  # read-only
        assert (tree / "autoresearch.sh").read_bytes() == (target / "autoresearch.sh").read_bytes()
    listed = gitrepo.run(repo, "worktree", "list")
    assert str(a) in listed and str(b) in listed
    remove_workdir(repo, workdir)
    assert not workdir.exists()
    assert str(a) not in gitrepo.run(repo, "worktree", "list")


def test_a_patch_that_does_not_apply(tmp_path: Path, target: Path) -> None:
    ws = make_ws(tmp_path, target)
    repo = gitrepo.open_repo(ws.mirror_path)
    with pytest.raises(DoesNotApply, match="does not apply"):
        commit_candidate(repo, ws.settings.target.baseline_commit, stale_diff(), "stale")


def test_a_missing_benchmark_script_is_a_clear_error(tmp_path: Path, target: Path) -> None:
    from kb.errors import UserError

    ws = make_ws(tmp_path, target, target={"bench_script": "bench/missing.sh"})
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    with pytest.raises(UserError, match="benchmark script 'bench/missing.sh'"):
        prepare_workdir(repo, tmp_path / "wd", baseline, baseline, resolve_scripts(ws, ws.settings))
