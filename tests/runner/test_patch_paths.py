"""What a patch touches is what git would apply: every spelling of a protected edit is refused, in
`queue add`, by the runner, and at the winner commit; an honest patch in the same run is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb import gitrepo
from kb.db import insert, one, rows, transaction, update
from kb.workspace import Workspace
from runner.harness import patchpaths
from runner.measure.run import RunOptions, start_run
from tests.runner.attacks import attack_diffs
from tests.runner.runner_target import make_diff, make_workspace, must

ATTACKS = [
    "quoted",
    "octal",
    "prefixes",
    "absolute",
    "dotdot",
    "mixed",
    "rename_from",
    "rename_onto",
    "copy_from",
    "mode",
    "delete",
    "binary",
    "symlink_protected",
    "symlink_out",
    "symlink_absolute",
    "gitlink",
    "gitattributes",
    "gitmodules",
]
# What each refusal must name.
NAMED = {
    "rename_onto": "experiment.yaml",
    "delete": "autoresearch.checks.sh",
    "symlink_out": "results.db",
    "symlink_absolute": "users.txt",
    "gitlink": "vendor/sub",
    "gitattributes": "sub/.gitattributes",
    "gitmodules": ".gitmodules",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path, dict[str, str]]:
    ws, target = make_workspace(tmp_path_factory.mktemp("paths"))
    return ws, target, attack_diffs(target)


def test_the_attack_list_is_complete(setup: tuple[Workspace, Path, dict[str, str]]) -> None:
    assert sorted(setup[2]) == sorted(ATTACKS)


@pytest.mark.parametrize("name", ATTACKS)
def test_every_spelling_git_accepts_is_refused(
    setup: tuple[Workspace, Path, dict[str, str]], name: str
) -> None:
    ws, _, diffs = setup
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    protected = patchpaths.protected_paths(ws, ws.settings)
    found = patchpaths.touched(diffs[name], repo, baseline)
    # Every attack but `..` (which git refuses to write) really applies: the refusal is not luck.
    assert found.applies is (name != "dotdot"), name
    why = patchpaths.refusal_of(found, protected)
    assert why is not None and NAMED.get(name, "autoresearch.sh") in why, (name, why)


def test_an_honest_patch_passes_and_names_what_git_writes(
    setup: tuple[Workspace, Path, dict[str, str]],
) -> None:
    ws, target, _ = setup
    honest = make_diff(target, "speedup")
    assert patchpaths.workspace_check(ws, honest) is None
    assert gitrepo.patch_names(honest) == ["prog.c"]  # outside any repository too
    # The names git reads from the quoted attack, not the header text.
    assert gitrepo.patch_names(attack_diffs(target)["octal"]) == ["autoresearch.sh"]


def queue_add(ws: Workspace, patch: Path, *args: str) -> tuple[int, str]:
    from tui.cli import main

    result = CliRunner().invoke(
        main, ["--workspace", str(ws.root), "queue", "add", str(patch), *args], catch_exceptions=False
    )
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ATTACKS)
def test_queue_add_refuses_every_spelling(
    setup: tuple[Workspace, Path, dict[str, str]], tmp_path: Path, name: str
) -> None:
    ws, _, diffs = setup
    patch = tmp_path / f"{name}.patch"
    patch.write_text(diffs[name])
    db = ws.db()
    before = must(one(db, "SELECT count(*) AS n FROM patches"))["n"]
    code, output = queue_add(ws, patch, "--title", f"Tune ({name})")
    assert code == 1 and "refused" in output and NAMED.get(name, "autoresearch.sh") in output, output
    assert len(output.strip().splitlines()) == 1
    assert must(one(db, "SELECT count(*) AS n FROM patches"))["n"] == before


def test_queue_add_still_takes_an_honest_patch(
    setup: tuple[Workspace, Path, dict[str, str]], tmp_path: Path
) -> None:
    ws, target, _ = setup
    patch = tmp_path / "speedup.patch"
    patch.write_text(make_diff(target, "speedup"))
    code, output = queue_add(ws, patch, "--title", "Skip the warm-up", "--json")
    assert code == 0, output
    assert json.loads(output)["files"] == ["prog.c"]


@pytest.mark.slow
@pytest.mark.forges_decisions
def test_the_runner_refuses_what_reaches_it_and_keeps_the_honest_patch(tmp_path: Path) -> None:
    """Patches written straight into the database (as a miner or an old queue would) reach the
    runner: each attack ends `refused` before anything runs, the honest speedup in the same wave is
    kept, and neither the run branch nor patches/ ever carries a protected file's change."""
    from runner.hypotheses import add_hypothesis, add_patch

    ws, target = make_workspace(tmp_path, fleet={"parallel": 2, "wave_size": 32})
    diffs = attack_diffs(target)
    db = ws.db()
    ids: dict[str, int] = {}
    for i, name in enumerate(["speedup", *ATTACKS]):
        diff = make_diff(target, "speedup") if name == "speedup" else diffs[name]
        hid = add_hypothesis(db, f"Patch {name}", status="approved", priority=100 - i)
        assert hid is not None
        ids[name] = add_patch(db, hid, diff, author_kind="manual", author=f"{name}.patch")
    lines: list[str] = []
    summary = start_run(ws, RunOptions(self_test=False, final=False), progress=lines.append).execute()
    assert summary.status == "finished", lines
    exps = {e["patch_id"]: e for e in summary.experiments if e["kind"] == "candidate"}
    assert exps[ids["speedup"]]["status"] == "kept", lines
    for name in ATTACKS:
        exp = exps[ids[name]]
        assert exp["status"] == "refused" and NAMED.get(name, "autoresearch.sh") in exp["reason"], (name, exp)
        assert not rows(db, "SELECT id FROM jobs WHERE experiment_id = ?", [exp["id"]])  # never ran
    repo = gitrepo.open_repo(ws.mirror_path)
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    changed = gitrepo.diff_trees(repo, run["baseline_commit"], f"refs/heads/{run['branch']}")
    assert [c.path for c in changed] == ["prog.c"]
    exported = sorted(ws.patches_dir.glob("*.patch"))
    assert len(exported) == 1 and gitrepo.patch_names(exported[0].read_text()) == ["prog.c"]

    # The last gate: an attack whose experiment was somehow kept is not committed either.
    attack = exps[ids["quoted"]]
    honest = exps[ids["speedup"]]
    decision = must(
        one(db, "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [honest["id"]])
    )
    with transaction(db):
        update(db, "experiments", attack["id"], {"status": "kept", "reason": None})
        insert(
            db,
            "decisions",
            {**{k: v for k, v in decision.items() if k != "id"}, "experiment_id": attack["id"]},
        )
    from runner.record.winners import commit_winner

    head = gitrepo.branch_head(repo, run["branch"])
    with pytest.raises(patchpaths.ProtectedPath, match="autoresearch.sh"):
        commit_winner(ws, db, attack["id"])
    assert gitrepo.branch_head(repo, run["branch"]) == head
    assert sorted(ws.patches_dir.glob("*.patch")) == exported
    assert not one(db, "SELECT id FROM winners WHERE experiment_id = ?", [attack["id"]])
