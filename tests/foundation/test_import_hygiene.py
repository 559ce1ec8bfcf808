"""The layers stay apart and start-up paths stay light (no litellm, sky or textual on them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["litellm", "sky", "textual", "trafilatura", "git", "matplotlib"]


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_linter_contracts() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("package", ["kb", "runner"])
def test_core_never_imports_textual(package: str) -> None:
    modules = [
        p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        for p in (ROOT / package).rglob("*.py")
    ]
    code = "\n".join(f"import {m}" for m in modules if not m.endswith("__main__"))
    loaded = loaded_after(code)
    assert "textual" not in loaded and "tui" not in loaded


def test_cli_help_path_is_light() -> None:
    loaded = loaded_after(
        "from click.testing import CliRunner\nfrom tui.cli import main\n"
        "r = CliRunner().invoke(main, ['--help'])\nassert r.exit_code == 0, r.output\n"
        "r = CliRunner().invoke(main, ['kb', '--help'])\nassert r.exit_code == 0, r.output"
    )
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_tui_package_never_imports_litellm_or_sky() -> None:
    modules = [
        p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".") for p in (ROOT / "tui").rglob("*.py")
    ]
    code = "\n".join(f"import {m}" for m in modules if not m.endswith("__main__"))
    loaded = loaded_after(code)
    assert not {m for m in loaded if m.split(".")[0] in ("litellm", "sky")}
