"""Shared fixtures: real git repositories and workspaces in tmp dirs, isolated from the user.

Also the CI skip guard: under CI=true a skipped test fails the run, unless it belongs to an opt-in
tier that is switched off (docs/testing.md). A skip is how a broken feature hides ("no sandbox on
this machine", a version mismatch, a package that fails to import), and CI is where it must not.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


@pytest.fixture(autouse=True)
def _isolate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[None]:
    """No test reads the developer's workspace, git config or telemetry settings, nor reaches
    the internet's scholarly APIs (discovery's `auto` is off; a test points them at 127.0.0.1)."""
    monkeypatch.delenv("AUTORESEARCH_WORKSPACE", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(exist_ok=True)
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    monkeypatch.setenv("AUTORESEARCH_OFFLINE", "1")
    yield
    if request.node.get_closest_marker("forges_decisions") is None:
        replay_stored_decisions(tmp_path)


def replay_stored_decisions(folder: Path) -> None:
    """Every look the loop recorded in a workspace a test left behind is judged again by the same
    judge on the stored samples (`redecide --check`) and must come out the same: the loop and
    `redecide` cannot drift apart while any test runs a real run."""
    import sqlite3

    import sqlite_utils

    from runner.record import history
    from runner.record.redecide import check

    for path in [*folder.glob("*/autoresearch.db"), *folder.glob("*/*/autoresearch.db")]:
        if not path.is_file():
            continue  # a test's stand-in for a database (a directory, on purpose)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            try:
                columns = {r[1] for r in conn.execute("PRAGMA table_info(decisions)").fetchall()}
            except sqlite3.DatabaseError:
                continue  # a test's damaged database, on purpose
            if "family" not in columns:
                continue  # not a workspace, or one left at an older schema on purpose
            db = sqlite_utils.Database(conn)
            for run in history.runs(db):
                result = check(db, run.id)
                assert not result.mismatches, (
                    f"{path}: run {run.name}: stored looks differ from their replay: "
                    + "; ".join(
                        f"exp {r.experiment_id} at {r.pairs} pairs: {r.why}" for r in result.mismatches
                    )
                )
        finally:
            conn.close()


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None, message: str = "baseline") -> Path:
    """A real git repository with one commit of `files` on branch main."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "target\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return path


@pytest.fixture
def target_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "target")


@pytest.fixture
def workspace(tmp_path: Path, target_repo: Path):  # type: ignore[no-untyped-def]
    from kb.init import TargetSpec, create_workspace

    return create_workspace(tmp_path / "ws", TargetSpec(location=str(target_repo)))


@pytest.fixture(scope="session")
def queue_template(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """5,000 mined fork-commit hypotheses on repositories built for it (tests/runner/queue_support.py),
    made once per session; tests copy it (`copy_queue`)."""
    from tests.runner.queue_support import mined_queue

    return mined_queue(tmp_path_factory.mktemp("queue"))


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The wheel built from the tree, its sdist and the wheel built from that (tests/packaging)."""
    from tests.packaging.wheel_support import build_wheels

    return build_wheels(tmp_path_factory.mktemp("packaging"))


@pytest.fixture(scope="session")
def installed_demo(tmp_path_factory: pytest.TempPathFactory, wheels):  # type: ignore[no-untyped-def]
    """`autoresearch demo`, run once per session by the installed wheel from an empty folder: the
    demo tests assert on its output and workspace, the packaging tests on the install."""
    from tests.packaging.wheel_support import run_installed_demo

    return run_installed_demo(tmp_path_factory.mktemp("installed-demo"), wheels["wheel"])


# --- the CI skip guard ---------------------------------------------------------------------------

# The opt-in tiers: a test with this marker may skip while its switch is off, and only then.
OPT_IN_TIERS = {"llamacpp": "AUTORESEARCH_LLAMACPP"}


def under_ci() -> bool:
    return os.environ.get("CI") == "true"


def allowed_skip(item: pytest.Item) -> bool:
    """Whether `item` may skip under CI: it belongs to an opt-in tier that is switched off."""
    return any(
        item.get_closest_marker(mark) is not None and os.environ.get(switch) != "1"
        for mark, switch in OPT_IN_TIERS.items()
    )


def _reason(longrepr: object) -> str:
    text = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and under_ci() and not hasattr(report, "wasxfail") and not allowed_skip(item):
        tiers = ", ".join(f"{mark} while {switch} != 1" for mark, switch in OPT_IN_TIERS.items())
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, where only the opt-in tiers may skip ({tiers}): "
            f"{_reason(report.longrepr)}"
        )
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A whole module skipped at import (pytest.skip(allow_module_level=True)) fails under CI too."""
    report = yield
    if report.skipped and under_ci():
        report.outcome = "failed"
        report.longrepr = f"{collector.nodeid}: skipped whole under CI=true: {_reason(report.longrepr)}"
    return report
