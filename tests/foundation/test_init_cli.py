"""`autoresearch init`, workspace discovery, and the bad-input contract of the foundation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.config import load_settings
from kb.errors import ConfigError
from tests.conftest import make_repo
from tui.cli import main

EXE = [sys.executable, "-m", "tui.cli"]


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command line, as a user runs it."""
    return subprocess.run(
        [*EXE, *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120
    )


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_init_creates_a_workspace(tmp_path: Path, target_repo: Path) -> None:
    result = cli(
        "init",
        str(tmp_path / "ws"),
        "--target",
        str(target_repo),
        "--metric",
        "tg",
        "--direction",
        "higher",
        "--build-cmd",
        "make -j2",
        "--protect",
        "CMakeLists.txt",
    )
    assert result.returncode == 0, result.stderr
    ws = tmp_path / "ws"
    for name in ("autoresearch.toml", "autoresearch.db", "mirror.git", "logs", "worktrees", "patches"):
        assert (ws / name).exists(), name
    settings = load_settings(ws / "autoresearch.toml")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=target_repo, capture_output=True, text=True
    ).stdout.strip()
    assert settings.target.baseline_commit == head
    assert settings.metric.primary == "tg"
    assert settings.target.build_cmd == "make -j2"
    assert settings.target.protect == ["CMakeLists.txt"]


def test_second_init_refuses_and_changes_nothing(tmp_path: Path, target_repo: Path) -> None:
    assert cli("init", str(tmp_path / "ws"), "--target", str(target_repo)).returncode == 0
    config = (tmp_path / "ws" / "autoresearch.toml").read_text()
    before = listing(tmp_path / "ws")
    result = cli("init", str(tmp_path / "ws"), "--target", str(target_repo))
    assert result.returncode == 1
    assert "already a workspace" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "ws" / "autoresearch.toml").read_text() == config
    assert listing(tmp_path / "ws") == before


@pytest.mark.parametrize(
    ("make_target", "extra", "message"),
    [
        (lambda p: (p / "plain").mkdir() or p / "plain", [], "not a git repository"),
        (lambda p: p / "missing", [], "no such folder"),
        (lambda p: make_repo(p / "repo"), ["--baseline", "no-such-ref"], "no-such-ref: unknown ref"),
        (lambda p: make_repo(p / "repo"), ["--metric", "12 t/s"], "metric.primary"),
        # `git init` and no commit yet: was "HEAD: unknown ref in ...".
        (lambda p: _empty_repo(p / "fresh"), [], "the repository has no commit yet; commit its sources"),
    ],
)
def test_init_bad_input_leaves_nothing(tmp_path: Path, make_target, extra: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    target = make_target(tmp_path)
    result = cli("init", str(tmp_path / "ws"), "--target", str(target), *extra)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "ws").exists()


def _empty_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "a.c").write_text("int a;\n")
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_init_on_a_repository_of_another_user_says_why_git_refuses(tmp_path: Path) -> None:
    """An sdist unpacked as root keeps its archive's owner: git refuses it as "dubious ownership".
    The reason was lost (the last line of GitPython's quoted stderr is a lone quote: "(')")."""
    repo = make_repo(tmp_path / "unpacked")
    subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
    result = cli("init", str(tmp_path / "ws"), "--target", str(repo))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot clone (fatal: detected dubious ownership" in lines[0]
    assert "safe.directory" in lines[0] and "chown" in lines[0]
    assert not (tmp_path / "ws").exists()


def test_init_into_existing_folder_cleans_up_on_failure(tmp_path: Path) -> None:
    folder = tmp_path / "existing"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    result = cli("init", str(folder), "--target", str(make_repo(tmp_path / "r")), "--baseline", "nope")
    assert result.returncode == 1
    assert listing(folder) == ["keep.txt"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[target\npath = 1", "malformed TOML"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"[target]\npath = '/x'\n[metric]\ndirection = 'sideways'\n", "metric.direction"),
        (b"[metric]\nprimary = 'tg'\n", "target: Field required"),
        (b"[target]\npath = '/x'\nunknown_key = 1\n", "target.unknown_key"),
    ],
)
def test_bad_config_is_one_line_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "autoresearch.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    text = str(info.value)
    assert str(path) in text and message in text and "\n" not in text


def test_unreadable_config(tmp_path: Path, workspace) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() == 0:
        # root reads anything: a folder in place of the file gives the same "cannot read" path
        workspace.config_path.unlink()
        workspace.config_path.mkdir()
    else:
        workspace.config_path.chmod(0)
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(workspace.config_path)


def test_commands_find_the_workspace(tmp_path: Path, workspace) -> None:  # type: ignore[no-untyped-def]
    nested = workspace.root / "logs" / "deeper"
    nested.mkdir(parents=True)
    for how in ("flag", "env", "cwd"):
        args = ["doctor", "--json"]
        env: dict[str, str] = {}
        cwd = tmp_path
        if how == "flag":
            args = ["--workspace", str(workspace.root), *args]
        elif how == "env":
            env = {"AUTORESEARCH_WORKSPACE": str(workspace.root)}
        else:
            cwd = nested
        result = cli(*args, cwd=cwd, env=env)
        assert result.returncode == 0, (how, result.stderr)
        assert str(workspace.root) in result.stdout


def test_no_workspace_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--workspace", str(tmp_path), "doctor"])
    assert result.exit_code == 1
    assert "not a workspace" in result.output


def test_database_that_is_not_sqlite(workspace) -> None:  # type: ignore[no-untyped-def]
    workspace.db_path.write_bytes(b"garbage" * 1000)
    for suffix in ("-wal", "-shm"):
        Path(str(workspace.db_path) + suffix).unlink(missing_ok=True)
    before = workspace.db_path.read_bytes()
    result = cli("--workspace", str(workspace.root), "doctor")
    assert result.returncode == 1
    assert "not a usable SQLite database" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert workspace.db_path.read_bytes() == before


def test_help_lists_every_command_group() -> None:
    result = cli("--help")
    assert result.returncode == 0
    for name in ("init", "kb", "hypotheses", "queue", "run", "history", "report", "analyze", "tui", "demo"):
        assert f"  {name} " in result.stdout


def test_no_help_shows_an_unbounded_number_as_a_range_to_none() -> None:
    """`queue add --help` showed `--priority NUMBER ... [default: 0.0; x<=None]` (and redecide and
    analyze the same): a number with no bounds has no range to show."""
    import click

    def walk(command: click.Command, path: list[str]) -> list[list[str]]:
        found = [path]
        if isinstance(command, click.Group):  # lazy groups load their commands when asked
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                found += walk(sub, [*path, name])
        return found

    runner = CliRunner()
    paths = walk(main, [])
    assert ["queue", "add"] in paths and ["analyze"] in paths
    for path in paths:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "<=None" not in result.output and ">=None" not in result.output, " ".join(path)


def test_init_says_when_the_target_has_edits_the_baseline_leaves_out(tmp_path: Path) -> None:
    """The baseline is a commit: edits not committed in the target are not measured, and init said
    nothing of them. Untracked files (build outputs) are not edits."""
    target = make_repo(tmp_path / "t", {"src/hash.c": "int h;\n", "README.md": "x\n"})
    (target / "src" / "hash.c").write_text("int h = 1;\n")
    (target / "hash.o").write_text("built\n")
    result = cli("init", str(tmp_path / "ws"), "--target", str(target))
    assert result.returncode == 0, result.stderr
    assert "note: 1 tracked file(s) of the target differ from its HEAD (src/hash.c)" in result.stdout
    assert "commit them and run init again" in result.stdout
    clean = make_repo(tmp_path / "clean")
    shown = cli("init", str(tmp_path / "ws2"), "--target", str(clean), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["uncommitted"] == []
