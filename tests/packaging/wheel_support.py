"""The package as a user installs it, built once per test session (tests/conftest.py's fixtures):
a wheel built from this tree, installed into a fresh venv, which runs `autoresearch demo` once from
an empty folder. The demo tests (tests/demo) assert on that run's output and workspace, the
packaging tests (tests/packaging) on the wheel and where the run's code came from.

The build runs in a copy of the tree's files (what a clean clone holds), so build/ and *.egg-info
never land in the developer's checkout. It needs no network: no build isolation (the test venv's
setuptools builds) and no dependencies installed into the new venv, which sees the test venv's
packages through a .pth file, added after the install so pip never looks at them. Such a path is
only put on sys.path, its own .pth files are not run, so the test venv's editable install of
autoresearch (a finder hook in a .pth) cannot mask the wheel: the packaging test checks where every
package is imported from.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import sysconfig
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def tracked_files() -> list[str]:
    """The tree's files as a clean clone has them (tracked, plus new ones not ignored)."""
    out = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    return sorted({name for name in out.split("\0") if name and os.path.lexists(ROOT / name)})


def copy_sources(dest: Path) -> None:
    for name in tracked_files():
        source, target = ROOT / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))  # relative links stay inside the copy
        else:
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)


def build_wheel(source: Path, dist: Path) -> Path:
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    run([*pip_wheel, "-w", str(dist), str(source)], source)
    (wheel,) = dist.glob("autoresearch-*.whl")
    return wheel


def build_wheels(base: Path) -> dict[str, Path]:
    """The wheel built from the tree, the tree's sdist, and the wheel built from that sdist."""
    source = base / "src"
    copy_sources(source)
    started = time.monotonic()
    direct = build_wheel(source, base / "dist")
    sdist_hook = f"from setuptools import build_meta; build_meta.build_sdist({str(base / 'sdist')!r})"
    run([sys.executable, "-c", sdist_hook], source)
    (sdist,) = (base / "sdist").glob("autoresearch-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(base / "unpacked", filter="data")
    (unpacked,) = (base / "unpacked").iterdir()
    from_sdist = build_wheel(unpacked, base / "dist-sdist")
    print(f"\nwheel and sdist -> wheel built in {time.monotonic() - started:.1f} s")
    return {"wheel": direct, "sdist": sdist, "wheel_from_sdist": from_sdist}


def venv_with_wheel(base: Path, wheel: Path) -> Path:
    """A fresh venv holding only the wheel; the test venv's packages visible behind it."""
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    python = venv / "bin" / "python"
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], base
    )
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base).strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "test-environment.pth").write_text("".join(f"{p}\n" for p in sorted(ours)), encoding="utf-8")
    return venv


def user_env(home: Path) -> dict[str, str]:
    """A user's environment: no source tree on the path, no workspace chosen, a home of its own."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTORESEARCH_WORKSPACE")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", DO_NOT_TRACK="1")
    return env


@dataclass(frozen=True)
class InstalledDemo:
    """`autoresearch demo` run once by the installed wheel, from an empty folder."""

    venv: Path
    folder: Path  # the empty folder it ran in
    directory: Path  # the demo's workspace: ./autoresearch-demo, the default
    proc: subprocess.CompletedProcess[str]
    seconds: float  # wall clock
    cpu_seconds: float  # user + system time of the demo's processes (every child it waited for)
    load: float  # the machine's load average over the run (the larger of the 1- and 5-minute ones)
    env: dict[str, str]


def run_installed_demo(base: Path, wheel: Path) -> InstalledDemo:
    venv = venv_with_wheel(base, wheel)
    folder = base / "empty"
    folder.mkdir()
    env = user_env(base / "home")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        [str(venv / "bin" / "autoresearch"), "demo"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    load = max(os.getloadavg()[:2])
    print(
        f"\ninstalled wheel: autoresearch demo {seconds:.1f} s wall, {cpu:.1f} s CPU, load {load:.1f}\n"
        f"{proc.stdout}\n{proc.stderr}"
    )
    return InstalledDemo(venv, folder, folder / "autoresearch-demo", proc, seconds, cpu, load, env)
