"""The package as a user installs it: a wheel built from this tree, installed into a fresh venv,
runs `autoresearch demo` from an empty folder with no source tree on its path.

The build runs in a copy of the tree's files (what a clean clone holds), so build/ and *.egg-info
never land in the developer's checkout. It needs no network: no build isolation (the test venv's
setuptools builds) and no dependencies installed into the new venv, which sees the test venv's
packages through a .pth file, added after the install so pip never looks at them. Such a path is
only put on sys.path, its own .pth files are not run, so the test venv's editable install of
autoresearch (a finder hook in a .pth) cannot mask the wheel: the test checks where every
package is imported from.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sqlite3
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kb", "runner", "tui", "autoresearch_examples")
pytestmark = pytest.mark.slow
WHERE_FROM = """
import json, kb, runner, tui, autoresearch_examples, kb.packaged as p
modules = [m.__file__ for m in (kb, runner, tui, autoresearch_examples)]
print(json.dumps([*modules, str(p.demo_dir()), str(p.llamacpp_script("autoresearch.sh"))]))
"""


def _run(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _tracked_files() -> list[str]:
    """The tree's files as a clean clone has them (tracked, plus new ones not ignored)."""
    out = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    return sorted({name for name in out.split("\0") if name and os.path.lexists(ROOT / name)})


def _copy_sources(dest: Path) -> None:
    for name in _tracked_files():
        source, target = ROOT / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))  # relative links stay inside the copy
        else:
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)


def _build_wheel(source: Path, dist: Path) -> Path:
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    _run([*pip_wheel, "-w", str(dist), str(source)], source)
    (wheel,) = dist.glob("autoresearch-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel built from the tree, and the one built from the tree's sdist (as `build` does)."""
    base = tmp_path_factory.mktemp("packaging")
    source = base / "src"
    _copy_sources(source)
    started = time.monotonic()
    direct = _build_wheel(source, base / "dist")
    sdist_hook = f"from setuptools import build_meta; build_meta.build_sdist({str(base / 'sdist')!r})"
    _run([sys.executable, "-c", sdist_hook], source)
    (sdist,) = (base / "sdist").glob("autoresearch-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(base / "unpacked", filter="data")
    (unpacked,) = (base / "unpacked").iterdir()
    from_sdist = _build_wheel(unpacked, base / "dist-sdist")
    print(f"\nwheel and sdist -> wheel built in {time.monotonic() - started:.1f} s")
    return {"wheel": direct, "sdist": sdist, "wheel_from_sdist": from_sdist}


def _wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


def test_wheel_carries_every_package_and_data_file(wheels: dict[str, Path]) -> None:
    files = _wheel_files(wheels["wheel"])
    tracked = _tracked_files()
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
    tracked = _tracked_files()
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


def _venv_with_wheel(base: Path, wheel: Path) -> Path:
    """A fresh venv holding only the wheel; the test venv's packages visible behind it."""
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], base
    )
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base).strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "test-environment.pth").write_text("".join(f"{p}\n" for p in sorted(ours)), encoding="utf-8")
    return venv


def test_installed_wheel_runs_the_demo_from_an_empty_folder(wheels: dict[str, Path], tmp_path: Path) -> None:
    venv = _venv_with_wheel(tmp_path, wheels["wheel"])
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTORESEARCH_WORKSPACE")}
    env.update(HOME=str(tmp_path / "home"), GIT_CONFIG_NOSYSTEM="1", DO_NOT_TRACK="1")
    (tmp_path / "home").mkdir(exist_ok=True)  # the autouse _isolate fixture may have made it

    # Every package comes from the new venv, the demo's files too: none from the source tree.
    where = json.loads(_run([str(venv / "bin" / "python"), "-c", WHERE_FROM], empty, env=env))
    for path in where:
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"{path}: not from the installed wheel"

    started = time.monotonic()
    out = _run([str(venv / "bin" / "autoresearch"), "demo", "--json"], empty, timeout=900, env=env)
    print(f"\ninstalled wheel: autoresearch demo in {time.monotonic() - started:.1f} s")
    result = json.loads(out)
    assert result["run_status"] == "finished", result.get("error")
    workspace = empty / "autoresearch-demo"
    assert Path(result["workspace"]) == workspace.resolve()
    assert len(result["kept"]) == 2 and all(k["commit"] for k in result["kept"])
    # The autopilot's two research phases and why the run stopped, in the --json output.
    assert [(r["phase"], r["after_waves"], r["mined"]) for r in result["research"]] == [(1, 0, 7), (2, 1, 0)]
    assert result["stop_reason"] == "no_hypotheses" and result["stop_meaning"]
    with sqlite3.connect(workspace / "autoresearch.db") as conn:
        winners = conn.execute("SELECT experiment_id, commit_sha FROM winners ORDER BY position").fetchall()
    assert sorted(w[0] for w in winners) == sorted(k["experiment_id"] for k in result["kept"])
    assert (workspace / "reports" / "demo.md").is_file()
