"""SkyPilot's SDK end to end on the local Slurm cluster that scripts/slurm/up.sh brings up.

Skips when that cluster is not reachable, except under CI (CI=true), where it must be there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.slurm_support import ENV_FILE, unreachable

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scripts" / "slurm" / "smoke.py"


@pytest.fixture(scope="module")
def slurm_env_file() -> Path:
    reason = unreachable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"local Slurm cluster needed under CI: {reason}")
        pytest.skip(reason)
    return ENV_FILE


@pytest.mark.slurm
@pytest.mark.slow
def test_launch_exec_logs_down(slurm_env_file: Path) -> None:
    # A process of its own: SkyPilot reads SKY_RUNTIME_DIR and friends when it is imported.
    proc = subprocess.run(
        [sys.executable, str(SMOKE), "--env-file", str(slurm_env_file)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, f"smoke.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    launch, exec_ = result["launch"], result["exec"]
    assert launch["status"] == "SUCCEEDED"
    assert "METRIC x=1" in launch["run_log"].splitlines()
    assert exec_["status"] == "SUCCEEDED"
    assert exec_["run_log"].splitlines() == ["METRIC x=2"]
    assert exec_["job_id"] == launch["job_id"] + 1
    assert result["after_down"] == []
