"""The layers stay apart and start-up paths stay light (no litellm, sky or textual on them)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["litellm", "sky", "textual", "trafilatura", "git", "matplotlib", "mcp", "uvicorn"]


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


SKYPILOT = ROOT / "runner" / "fleet" / "skypilot"


def sky_importers(package: Path) -> set[str]:
    """The modules of a package with `import sky...` or `from sky... import` anywhere (functions too)."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(n == "sky" or n.startswith("sky.") for n in names):
                found.add(path.relative_to(package).as_posix())
    return found


def test_only_the_sdk_adapter_imports_sky() -> None:
    # `import sky` takes seconds and SkyPilot's telemetry must be off first: one module does it.
    assert sky_importers(SKYPILOT) == {"sdk.py"}


def test_the_sky_import_rule_catches_a_stray_import(tmp_path: Path) -> None:
    (tmp_path / "sdk.py").write_text("def f():\n    import sky\n", encoding="utf-8")
    (tmp_path / "jobs.py").write_text("def g():\n    from sky.utils import common\n", encoding="utf-8")
    (tmp_path / "tasks.py").write_text("import skypilot_like\nfrom . import sdk\n", encoding="utf-8")
    assert sky_importers(tmp_path) == {"sdk.py", "jobs.py"}
