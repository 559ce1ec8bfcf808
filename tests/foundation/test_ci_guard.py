"""The CI skip guard of tests/conftest.py: under CI=true a skip fails the run, except in an opt-in tier
whose switch is off (the llama.cpp tests without AUTORESEARCH_LLAMACPP=1).

Each case runs an inner pytest in a process of its own, on a small test file, with the project's
conftest loaded as a plugin (`-p tests.conftest`) and the environment the case names."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SKIPS = """
import os
import pytest

def test_skips_in_its_body():
    pytest.skip("no sandbox on this machine")

@pytest.mark.skipif(True, reason="a version mismatch")
def test_skipped_by_a_mark():
    pass

@pytest.mark.llamacpp
@pytest.mark.skipif(os.environ.get("AUTORESEARCH_LLAMACPP") != "1", reason="set AUTORESEARCH_LLAMACPP=1")
def test_opt_in():
    pass

@pytest.mark.llamacpp
def test_in_the_tier_skipping_for_another_reason():
    pytest.skip("the model is missing")

def test_passes():
    pass
"""


def inner_pytest(tmp_path: Path, source: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llamacpp: opt-in\n")
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "AUTORESEARCH_LLAMACPP")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-v",
            "-rfEs",
            *args,
        ],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def outcomes(out: str) -> dict[str, str]:
    """test name -> PASSED, FAILED, ERROR or SKIPPED, from the -v lines (`test_inner.py::name WORD`)."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("test_inner.py::"):
            name, word = line.removeprefix("test_inner.py::").split()[:2]
            found[name] = word  # a failed set-up adds an ERROR line after its own
    return found


def test_under_ci_a_skip_outside_the_opt_in_tiers_fails_the_run(tmp_path: Path) -> None:
    run = inner_pytest(tmp_path, SKIPS, CI="true")
    assert run.returncode == 1, run.stdout
    got = outcomes(run.stdout)
    assert got["test_skips_in_its_body"] == "FAILED"
    assert got["test_skipped_by_a_mark"] == "ERROR"  # skipped at set-up: the set-up fails
    assert got["test_passes"] == "PASSED"
    assert "skipped under CI=true, where only the opt-in tiers may skip" in run.stdout
    assert "no sandbox on this machine" in run.stdout and "a version mismatch" in run.stdout
    # The opt-in tier, its switch off, may skip: those are the only skips.
    assert got["test_opt_in"] == got["test_in_the_tier_skipping_for_another_reason"] == "SKIPPED"
    last = run.stdout.splitlines()[-1]
    assert "1 passed" in last and "2 skipped" in last and "1 failed" in last and "1 error" in last, last


def test_under_ci_an_opt_in_skip_alone_passes(tmp_path: Path) -> None:
    run = inner_pytest(tmp_path, SKIPS, "-k", "test_opt_in or test_passes", CI="true")
    assert run.returncode == 0, run.stdout
    last = run.stdout.splitlines()[-1]
    assert "1 passed" in last and "1 skipped" in last and "failed" not in last, last


def test_switched_on_the_opt_in_tier_may_not_skip(tmp_path: Path) -> None:
    source = SKIPS.replace('os.environ.get("AUTORESEARCH_LLAMACPP") != "1"', "True")
    run = inner_pytest(tmp_path, source, "-k", "opt_in or tier", CI="true", AUTORESEARCH_LLAMACPP="1")
    assert run.returncode == 1, run.stdout
    assert outcomes(run.stdout) == {
        "test_opt_in": "ERROR",
        "test_in_the_tier_skipping_for_another_reason": "FAILED",
    }


def test_outside_ci_skips_are_skips(tmp_path: Path) -> None:
    run = inner_pytest(tmp_path, SKIPS)
    assert run.returncode == 0, run.stdout
    last = run.stdout.splitlines()[-1]
    assert "1 passed" in last and "4 skipped" in last, last


def test_under_ci_a_module_skipped_whole_fails_the_run(tmp_path: Path) -> None:
    source = 'import pytest\npytest.skip("textual is not the pinned one", allow_module_level=True)\n'
    run = inner_pytest(tmp_path, source, CI="true")
    assert run.returncode != 0, run.stdout
    assert "skipped whole under CI=true: textual is not the pinned one" in run.stdout
