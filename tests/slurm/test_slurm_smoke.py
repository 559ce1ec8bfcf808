"""SkyPilot's SDK end to end on the local Slurm cluster that scripts/slurm/up.sh brings up.

Skips when that cluster is not reachable, except under CI (CI=true), where it must be there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scripts" / "slurm" / "smoke.py"
STATE = Path(os.environ.get("AUTORESEARCH_SLURM_STATE", "/var/lib/autoresearch-slurm"))
ENV_FILE = STATE / "env.sh"


def _unreachable() -> str | None:
    """Why the cluster cannot be used, or None when it can."""
    if not ENV_FILE.is_file():
        return f"{ENV_FILE} missing: run scripts/slurm/up.sh"
    port = 2222
    for line in ENV_FILE.read_text().split():
        if line.startswith("AUTORESEARCH_SLURM_SSH_PORT="):
            port = int(line.partition("=")[2])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError as exc:
        return f"login node 127.0.0.1:{port} unreachable: {exc}"
    try:
        sinfo = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if sinfo.returncode != 0 or not ({"idle", "mix", "alloc"} & set(sinfo.stdout.split())):
        return f"no usable Slurm node: {sinfo.stdout.strip() or sinfo.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def slurm_env_file() -> Path:
    reason = _unreachable()
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
