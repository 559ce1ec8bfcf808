"""The experiment template renders into a valid SkyPilot task with this batch's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.errors import UserError
from runner.harness.template import REQUIRED_ENVS, load_template, one_line, render


def test_packaged_template_has_the_protocol() -> None:
    config = load_template()
    envs = config["envs"]
    for name in (*REQUIRED_ENVS, "PAIRS", "PAIR_START", "BENCH_SCRIPT", "CHECKS_SCRIPT", "RUN_CHECKS"):
        assert name in envs
    assert "EXPERIMENT_STATUS: $1" in config["run"]
    assert "timeout" in config["run"] and "env -u AUTORESEARCH_NONCE" in config["run"]
    assert config["setup"].strip()


def test_render_sets_workdir_envs_and_resources(tmp_path: Path) -> None:
    config = load_template()
    task = render(
        config,
        name="ar-r1-e3-b0",
        workdir=tmp_path,
        envs={"EXPERIMENT_ID": 3, "PAIRS": 12, "EXPERIMENT_DESC": "x"},
        resources_override={"infra": "slurm/c/p", "cpus": "4+", "memory": ""},
    )
    assert task.workdir == tmp_path and task.config["workdir"] == str(tmp_path)
    assert task.envs["EXPERIMENT_ID"] == "3" and task.envs["PAIRS"] == "12"
    assert task.envs["BUILD_TIMEOUT"] == str(config["envs"]["BUILD_TIMEOUT"])  # template default kept
    assert all(isinstance(v, str) for v in task.envs.values())
    assert task.config["resources"] == {"cpus": "4+", "infra": "slurm/c/p"}
    assert config["workdir"] == "."  # the template itself is not modified
    assert "ar-r1-e3-b0" in task.to_yaml()


def test_rendered_task_is_a_valid_skypilot_task(tmp_path: Path) -> None:
    import sky  # a required dependency: a broken install fails here, never skips

    task = render(load_template(), name="ar-r1-e3-b0", workdir=tmp_path, envs={"EXPERIMENT_ID": 3})
    sky_task = sky.Task.from_yaml_config(dict(task.config))
    assert sky_task.envs["EXPERIMENT_ID"] == "3"
    assert sky_task.workdir == str(tmp_path)
    assert sky_task.run == task.run and sky_task.setup == task.setup


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("run: [unclosed", "malformed YAML"),
        ("- a list\n", "must be a YAML mapping"),
        ("envs: {}\n", "needs a `run` script"),
        ("run: echo hi\nenvs: {EXPERIMENT_ID: 1}\n", "lacks EXPERIMENT_DESC"),
        ("run: echo hi\nsetup: [1]\n", "`setup` must be a script"),
    ],
)
def test_bad_templates_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as info:
        load_template(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_render_refuses_a_relative_workdir() -> None:
    with pytest.raises(UserError, match="absolute"):
        render(load_template(), name="x", workdir=Path("rel"), envs={})


def test_one_line() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert len(one_line("x" * 500)) == 200
