"""The package as a user installs it: a wheel built from this tree (and from its sdist), installed
into a fresh venv, runs `autoresearch demo` from an empty folder with no source tree on its path.
The build, the install and the demo run are made once per session (tests/packaging/wheel_support.py,
fixtures `wheels` and `installed_demo` in tests/conftest.py); tests/demo asserts on the same run.
"""

from __future__ import annotations

import fnmatch
import json
import tarfile
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from kb import gitrepo
from kb.db import connect, rows
from tests.packaging.wheel_support import ROOT, InstalledDemo, run, tracked_files

PACKAGES = ("kb", "runner", "tui", "autoresearch_examples")
# The first test here may build the wheel and run the demo (the session fixture installed_demo).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
WHERE_FROM = """
import json, kb, runner, tui, autoresearch_examples, kb.packaged as p
modules = [m.__file__ for m in (kb, runner, tui, autoresearch_examples)]
print(json.dumps([*modules, str(p.demo_dir()), str(p.llamacpp_script("autoresearch.sh"))]))
"""


def _wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


def test_wheel_carries_every_package_and_data_file(wheels: dict[str, Path]) -> None:
    files = _wheel_files(wheels["wheel"])
    tracked = tracked_files()
    # Every Python package of the tree, subpackages included (setup.py's find).
    for init in (n for n in tracked if n.endswith("/__init__.py") and n.split("/")[0] in PACKAGES[:3]):
        assert init in files, f"{init}: package missing from the wheel"
    # The demo exactly as tracked in examples/demo (dotfiles included, no __pycache__).
    demo = {
        n.replace("examples/", "autoresearch_examples/", 1) for n in tracked if n.startswith("examples/demo/")
    }
    shipped = {n for n in files if n.startswith("autoresearch_examples/demo/")}
    assert shipped == demo
    # The skill `autoresearch mcp --skill` prints and serves.
    assert "tui/agents/SKILL.md" in files
    # The llama.cpp reference scripts: the repository root's files, as regular files.
    with zipfile.ZipFile(wheels["wheel"]) as zf:
        for name in ("autoresearch.sh", "autoresearch.checks.sh"):
            assert zf.read(f"autoresearch_examples/llamacpp/{name}") == (ROOT / name).read_bytes()
            mode = zf.getinfo(f"autoresearch_examples/llamacpp/{name}").external_attr >> 16
            assert mode & 0o170000 == 0o100000, f"{name}: not a regular file in the wheel"


def test_sdist_builds_the_same_wheel(wheels: dict[str, Path]) -> None:
    assert _wheel_files(wheels["wheel_from_sdist"]) == _wheel_files(wheels["wheel"])
    with tarfile.open(wheels["sdist"]) as tar:
        links = [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
    assert links == [], f"the sdist holds links a build may not resolve: {links}"


def test_no_dead_package_data_entries() -> None:
    """Each package-data pattern in pyproject.toml matches at least one file of its package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {"autoresearch_examples": "examples"}
    tracked = tracked_files()
    for package, patterns in config["package-data"].items():
        folder = folders.get(package, package.replace(".", "/"))
        inside = [n[len(folder) + 1 :] for n in tracked if n.startswith(folder + "/")]
        for pattern in patterns:
            # setuptools globs with recursive **: `a/**/*` also matches files directly in a/.
            flat = pattern.replace("/**/", "/")
            matched = [
                n
                for n in inside
                if PurePosixPath(n).match(pattern) or fnmatch.fnmatch(n, flat) or fnmatch.fnmatch(n, pattern)
            ]
            assert matched, f"package-data {package!r}: {pattern!r} matches no file"


def test_installed_wheel_runs_the_demo_from_an_empty_folder(installed_demo: InstalledDemo) -> None:
    demo = installed_demo
    # Every package comes from the new venv, the demo's files too: none from the source tree.
    where = json.loads(run([str(demo.venv / "bin" / "python"), "-c", WHERE_FROM], demo.folder, env=demo.env))
    for path in where:
        assert Path(path).resolve().is_relative_to(demo.venv.resolve()), (
            f"{path}: not from the installed wheel"
        )

    # `autoresearch demo` with no folder named: ./autoresearch-demo, the whole loop to its end.
    assert demo.proc.returncode == 0, demo.proc.stderr
    assert sorted(p.name for p in demo.folder.iterdir()) == ["autoresearch-demo"]
    assert f"Report: {demo.directory.resolve()}/reports/demo.md" in demo.proc.stdout
    db = connect(demo.directory / "autoresearch.db")
    try:
        run_row = rows(db, "SELECT status, stop_reason FROM runs WHERE name = 'demo'")
        assert run_row == [{"status": "finished", "stop_reason": "no_hypotheses"}]
        winners = rows(db, "SELECT commit_sha FROM winners ORDER BY position")
    finally:
        db.conn.close()
    # Two winners, committed on the demo's branch of the workspace's mirror.
    mirror = gitrepo.open_repo(demo.directory / "mirror.git")
    head = gitrepo.branch_head(mirror, "autoresearch/demo")
    assert len(winners) == 2 and head is not None
    assert all(gitrepo.is_ancestor(mirror, w["commit_sha"], head) for w in winners)
    assert (demo.directory / "reports" / "demo.md").is_file()
