"""The SkyPilot backend's offline half, with the real `sky` package: tasks rendered from
runner/harness/experiment.yaml and validated by SkyPilot, clear errors before anything launches, the
workdir sync prelude run for real in bash, and the A/A qualification read from a job log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.db import insert, now, one
from kb.errors import UserError
from runner.fleet.skypilot import (
    MANIFEST,
    for_cluster,
    qualification_noise,
    sky_task,
    sync_prelude,
    task_name,
    tree_id,
    write_manifest,
)
from runner.harness.template import load_template, render
from tests.runner.runner_target import make_workspace, must, queue

ROOT = Path(__file__).resolve().parents[2]
SKY_FLEET = {
    "backend": "skypilot",
    "skypilot": {"infra": "kubernetes", "cpus": "2", "memory": "4"},
}


def loop_envs(**overrides: Any) -> dict[str, Any]:
    """The envs runner/measure/ gives a batch (values of every type the loop passes)."""
    envs: dict[str, Any] = {
        "EXPERIMENT_ID": 12,
        "EXPERIMENT_DESC": 'Fuse "RMS_NORM + MUL" (it\'s $cheap)',
        "BUILD_CMD": "make -j$(nproc)",
        "BUILD_TIMEOUT": 900,
        "BENCH_TIMEOUT": 300,
        "CHECK_TIMEOUT": 300,
        "BENCH_SCRIPT": "autoresearch.sh",
        "CHECKS_SCRIPT": "autoresearch.checks.sh",
        "A_DIR": "a",
        "B_DIR": "b",
        "BATCH": 1,
        "PAIR_START": 6,
        "PAIRS": 6,
        "RUN_CHECKS": 0,
        "AUTORESEARCH_NONCE": "0123456789abcdef",
    }
    envs.update(overrides)
    return envs


def test_the_packaged_template_renders_to_a_valid_sky_task(tmp_path: Path) -> None:
    import sky

    template = load_template()
    rendered = render(
        template,
        name="ar-run_1-e12-b1",
        workdir=tmp_path,
        envs=loop_envs(),
        resources_override={
            "infra": "kubernetes",
            "cpus": "2",
            "memory": "4",
            "accelerators": "",
        },
    )
    task = sky_task(for_cluster(rendered), "runner/harness/experiment.yaml")
    assert isinstance(task, sky.Task)
    task.validate()  # again, as SkyPilot's own client does before a launch
    assert task.name == "ar-run_1-e12-b1"
    # Every env is a string, the loop's values override the template's defaults, the rest stay.
    assert task.envs["PAIRS"] == "6" and template["envs"]["PAIRS"] == "8"
    assert task.envs["PAIR_START"] == "6" and task.envs["RUN_CHECKS"] == "0"
    assert task.envs["EXPERIMENT_DESC"] == 'Fuse "RMS_NORM + MUL" (it\'s $cheap)'
    assert task.envs["AUTORESEARCH_NONCE"] == "0123456789abcdef"
    assert set(template["envs"]) <= set(task.envs)
    assert all(isinstance(v, str) for v in task.envs.values())
    # The template says `workdir: .`; the task carries the experiment's absolute tree instead.
    assert template["workdir"] == "."
    assert task.workdir == str(tmp_path)
    # The template's setup and run, with the sync prelude in front of run only.
    assert task.setup == template["setup"]
    assert task.run.startswith(sync_prelude(tree_id(tmp_path)))
    assert task.run.endswith(template["run"])
    (resources,) = task.resources
    assert str(resources.cloud) == "Kubernetes"
    assert resources.cpus == "2" and resources.memory == "4"


def test_env_overrides_are_strings_and_none_is_empty(tmp_path: Path) -> None:
    rendered = render(
        load_template(),
        name="t",
        workdir=tmp_path,
        envs=loop_envs(EXPERIMENT_DESC=None, BUILD_CMD="cmake --build build -j 4", EXTRA_FLAG=1.5),
    )
    task = sky_task(for_cluster(rendered), "t")
    assert task.envs["EXPERIMENT_DESC"] == ""
    assert task.envs["BUILD_CMD"] == "cmake --build build -j 4"
    assert task.envs["EXTRA_FLAG"] == "1.5"
    # No resources_override: the template's own `cpus: 4+` stands, any infra.
    (resources,) = task.resources
    assert resources.cpus == "4+" and resources.cloud is None


def test_a_relative_workdir_is_refused_before_sky_sees_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^exp/tree: the task workdir must be an absolute path"):
        render(load_template(), name="t", workdir=Path("exp/tree"), envs=loop_envs())


def test_a_missing_workdir_is_a_clear_error(tmp_path: Path) -> None:
    rendered = render(load_template(), name="t", workdir=tmp_path / "gone", envs=loop_envs())
    with pytest.raises(
        UserError, match=r"^experiment 3: not a valid SkyPilot task \(ValueError: Workdir must"
    ):
        sky_task(for_cluster(rendered), "experiment 3")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resources": {"cpu": 4}}, r"InvalidSkyPilotConfigError: Invalid resources YAML: Instead of 'cpu'"),
        ({"resources": {"cpus": "4+", "use_spot": "maybe"}}, r"'maybe' is not of type 'boolean'"),
        (
            {"file_mount": {"/x": "/y"}},
            r"Invalid task YAML: Instead of 'file_mount', did you mean 'file_mounts'",
        ),
    ],
)
def test_a_malformed_template_fails_the_preflight_and_no_run_is_written(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    import yaml

    from runner.fleet import preflight
    from runner.measure.run import RunOptions, start_run

    ws, _ = make_workspace(tmp_path, fleet={**SKY_FLEET, "template": "task.yaml"})
    template = {**load_template(), **change}
    (ws.root / "task.yaml").write_text(yaml.safe_dump(template))
    with pytest.raises(
        UserError, match=rf"^{ws.root / 'task.yaml'}: not a valid SkyPilot task \(.*{message}"
    ):
        preflight("skypilot", ws)
    with pytest.raises(UserError, match="not a valid SkyPilot task"):
        start_run(ws, RunOptions(backend="skypilot"))
    assert must(one(ws.db(), "SELECT count(*) AS n FROM runs"))["n"] == 0


def test_malformed_template_yaml_is_one_line(tmp_path: Path) -> None:
    from runner.fleet import preflight

    ws, _ = make_workspace(tmp_path, fleet={**SKY_FLEET, "template": "task.yaml"})
    (ws.root / "task.yaml").write_text("run: [unclosed\n")
    with pytest.raises(UserError, match=r"task.yaml: malformed YAML") as err:
        preflight("skypilot", ws)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            {"infra": "nonsense"},
            r"infra='nonsense'.*\): invalid resources \(InvalidSkyPilotConfigError: Invalid",
        ),
        ({"cpus": "lots"}, r"cpus='lots'.*\): invalid resources \(ValueError: The \"cpus\" field should be"),
        ({"memory": "abc"}, r"memory='abc'\): invalid resources \(ValueError: \"memory\" field should be"),
        ({"accelerators": "H100:x"}, r"invalid resources \(ValueError: The \"accelerators\" field"),
    ],
)
def test_a_malformed_resource_spec_stops_the_cli_before_anything_launches(
    tmp_path: Path, resources: dict[str, str], message: str
) -> None:
    from tui.cli import main

    ws, _ = make_workspace(
        tmp_path, fleet={"backend": "local", "skypilot": {"infra": "kubernetes", **resources}}
    )
    result = CliRunner(mix_stderr=False).invoke(
        main, ["--workspace", str(ws.root), "run", "--backend", "skypilot"]
    )
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "fleet.skypilot (" in lines[0]
    import re

    assert re.search(message, lines[0]), lines[0]
    assert must(one(ws.db(), "SELECT count(*) AS n FROM runs"))["n"] == 0
    assert not list((ws.worktrees_dir).glob("*qualify*"))


LOCAL_RUN = """
import json, sys
from tui.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print("IMPORTED " + json.dumps(sorted(m for m in sys.modules if m == "sky" or m.startswith("sky."))))
"""


def test_the_local_backend_needs_no_sky(tmp_path: Path) -> None:
    """A run on the local fleet, in a process of its own, never imports `sky` (seconds of import
    time, and a broken SkyPilot install must not stop local runs): its workspace even has a
    skypilot section SkyPilot would refuse."""
    ws, target = make_workspace(
        tmp_path,
        fleet={"skypilot": {"cpus": "lots"}},
        policy={"min_pairs": 4, "batch_pairs": 4, "max_pairs": 4},
    )
    queue(ws, target, ["speedup"])
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            LOCAL_RUN,
            "--workspace",
            str(ws.root),
            "run",
            "--skip-self-test",
            "--no-final",
        ]
        + ["--json"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout[: run.stdout.rindex("IMPORTED ")])
    [measured] = summary["experiments"]  # a local job ran it: pairs measured, a decision
    assert summary["status"] == "finished" and measured["pairs"] == 4, summary
    assert measured["status"] in ("kept", "discarded", "inconclusive"), measured
    assert json.loads(run.stdout.rsplit("IMPORTED ", 1)[1]) == []


def test_task_names_are_made_valid() -> None:
    assert task_name("ar-20261202-170124-e12-b0") == "ar-20261202-170124-e12-b0"
    assert task_name("ar-my run!---x-e1") == "ar-my-run--x-e1"
    assert task_name("__x__") == "x"
    assert task_name("!!!") == "autoresearch"


# --- the sync prelude, for real in bash -----------------------------------------------------------


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def sync(local: Path, remote: Path) -> None:
    """What SkyPilot's workdir rsync (-a, no --delete) does: add and update, never delete."""
    for folder, _dirs, files in os.walk(local):
        for name in [*files, *(d for d in _dirs if os.path.islink(os.path.join(folder, d)))]:
            source = Path(folder) / name
            target = remote / source.relative_to(local)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            if source.is_symlink():
                target.symlink_to(os.readlink(source))
            else:
                shutil.copy2(source, target)


def run_prelude(remote: Path, local: Path) -> None:
    script = sync_prelude(tree_id(local)) + 'echo "prelude done"\n'
    out = subprocess.run(["bash", "-c", script], cwd=remote, capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("prelude done"), out.stderr


def test_the_sync_prelude_removes_what_the_previous_tree_left(tmp_path: Path) -> None:
    remote = tmp_path / "sky_workdir"
    remote.mkdir()
    first = tree(
        tmp_path / "exp1",
        {"a/prog.c": "base", "b/prog.c": "cand1", "b/added by patch 1.c": "x", "a/odd\nname.txt": "y"},
    )
    (first / "b" / "link").symlink_to("prog.c")
    write_manifest(first)
    sync(first, remote)
    run_prelude(remote, first)
    # The job builds: outputs and stamps appear on the cluster only.
    (remote / "a" / "prog").write_text("binary")
    (remote / ".autoresearch" / "built-A").write_text("")
    # The same experiment's next batch keeps its build.
    sync(first, remote)
    run_prelude(remote, first)
    assert (remote / "a" / "prog").exists() and (remote / ".autoresearch" / "built-A").exists()

    second = tree(tmp_path / "exp2", {"a/prog.c": "base", "b/prog.c": "cand2", "b/new dir/f.h": "z"})
    write_manifest(second)
    sync(second, remote)
    run_prelude(remote, second)
    present = sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file() or p.is_symlink())
    assert present == [
        ".autoresearch-manifest",
        ".autoresearch/tree",
        "a/prog.c",
        "b/new dir/f.h",
        "b/prog.c",
    ]
    assert (remote / "b" / "prog.c").read_text() == "cand2"
    assert (remote / ".autoresearch" / "tree").read_text().strip() == tree_id(second)


def test_the_manifest_lists_files_and_links_but_not_stamps(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"a/x.c": "", "b/sub/y.c": "", ".autoresearch/built-A": ""})
    (root / "b" / "dirlink").symlink_to("sub")
    (root / MANIFEST).write_text("stale")
    assert write_manifest(root) == 3
    names = sorted((root / MANIFEST).read_bytes().split(b"\0")[:-1])
    assert names == [b"a/x.c", b"b/dirlink", b"b/sub/y.c"]


# --- qualification ------------------------------------------------------------------------------------


def aa_log(nonce: str, values: list[tuple[float, float]], status: str = "done") -> bytes:
    lines = [f"@@AR {nonce} 1.0 PHASE bench"]
    for pair, (a, b) in enumerate(values):
        for side, value in (("A", a), ("B", b)):
            lines += [
                f"@@AR {nonce} 2.0 BEGIN {pair} {side}",
                f"METRIC tps={value}",
                f"@@AR {nonce} 3.0 END {pair} {side} 0",
            ]
    lines += ["@@AR deadbeef 4.0 STATUS done", "METRIC tps=1e9"]  # forged: ignored
    if status:
        lines.append(f"@@AR {nonce} 5.0 STATUS {status}")
    return ("\n".join(lines) + "\n").encode()


def test_qualification_noise_is_the_larger_sides_cv() -> None:
    from runner import stats

    pairs = [(100.0, 101.0), (102.0, 99.0), (98.0, 100.0), (101.0, 104.0)]
    noise, why = qualification_noise(aa_log("n1", pairs), "n1", "tps")
    assert why == ""
    a = stats.noise([p[0] for p in pairs])
    b = stats.noise([p[1] for p in pairs])
    assert a is not None and b is not None and noise == pytest.approx(max(a, b))
    assert 0.01 < noise < 0.03


def test_qualification_without_a_status_or_samples_says_why() -> None:
    assert qualification_noise(aa_log("n1", [(1.0, 1.0)] * 3, status=""), "n1", "tps") == (
        None,
        "the A/A job ended without a status",
    )
    assert qualification_noise(aa_log("n1", [(1.0, 1.0)] * 3), "n1", "other") == (
        None,
        "the A/A job printed too few METRIC other samples",
    )


# --- import and telemetry ------------------------------------------------------------------------------


def test_sky_is_imported_lazily_with_telemetry_off() -> None:
    code = (
        "import os, sys, json\n"
        "for k in ('SKYPILOT_DISABLE_USAGE_COLLECTION', 'DO_NOT_TRACK', 'SCARF_NO_ANALYTICS'):\n"
        "    os.environ.pop(k, None)\n"
        "os.environ['DO_NOT_TRACK'] = '0'\n"  # a user's explicit choice is kept
        "import runner.fleet.skypilot as m\n"
        "before = 'sky' in sys.modules\n"
        "m.sky_module()\n"
        "from sky.usage import constants\n"
        "print(json.dumps([before, 'sky' in sys.modules, os.environ['SKYPILOT_DISABLE_USAGE_COLLECTION'],"
        " os.environ['DO_NOT_TRACK'], os.environ['SCARF_NO_ANALYTICS']]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True, "1", "0", "1"]


# --- `autoresearch fleet status` ------------------------------------------------------------------------


def test_fleet_status_lists_live_clusters_with_costs(tmp_path: Path) -> None:
    from tui.cli import main

    ws, _ = make_workspace(tmp_path, fleet=SKY_FLEET)
    db = ws.db()
    stamp = now()
    run_id = insert(
        db, "runs", {"name": "r1", "status": "finished", "backend": "skypilot", "started_at": stamp}
    )
    base = {"run_id": run_id, "backend": "skypilot", "price_per_hour": 0.5, "started_at": stamp - 600}
    insert(
        db,
        "workers",
        {
            **base,
            "name": "ar-r1-aaaaaa",
            "status": "ready",
            "noise": 0.042,
            "cost_usd": 0.0833,
            "meta": json.dumps({"phase": "ready", "launched_at": stamp - 600}),
        },
    )
    insert(
        db,
        "workers",
        {
            **base,
            "name": "ar-r1-bbbbbb",
            "status": "failed",
            "cost_usd": 0.01,
            "ended_at": stamp - 300,
            "meta": json.dumps(
                {"phase": "failed", "reason": "too noisy: A/A noise 23.0% > limit 10.0%", "teardown": "done"}
            ),
        },
    )
    insert(
        db,
        "llm_calls",
        {
            "run_id": run_id,
            "purpose": "patch",
            "model": "m",
            "prompt": "[]",
            "cost_usd": 0.25,
            "created_at": stamp,
        },
    )
    runner = CliRunner(mix_stderr=False)
    shown = runner.invoke(main, ["--workspace", str(ws.root), "fleet", "status"])
    assert shown.exit_code == 0, shown.output
    assert "ar-r1-aaaaaa" in shown.output and "ar-r1-bbbbbb" not in shown.output
    assert "4.2%" in shown.output and "$0.500" in shown.output
    assert "run r1 (finished): VM $0.0933 (experiments $0.0000), LLM $0.2500" in shown.output
    every = runner.invoke(main, ["--workspace", str(ws.root), "fleet", "status", "--all", "--json"])
    data = json.loads(every.stdout)
    assert [w["name"] for w in data["workers"]] == ["ar-r1-aaaaaa", "ar-r1-bbbbbb"]
    assert data["workers"][1]["reason"].startswith("too noisy")
    assert data["runs"] == [
        {
            "run_id": run_id,
            "run": "r1",
            "status": "finished",
            "vm_usd": 0.0933,
            "experiments_usd": 0.0,
            "llm_usd": 0.25,
        }
    ]


def test_fleet_status_on_an_empty_workspace(tmp_path: Path) -> None:
    from tui.cli import main

    ws, _ = make_workspace(tmp_path)
    out = CliRunner().invoke(main, ["--workspace", str(ws.root), "fleet", "status"])
    assert out.exit_code == 0 and "No workers up" in out.output
