"""Helpers for the SkyPilot suite on the local Slurm cluster of scripts/slurm/up.sh.

SkyPilot reads SKY_RUNTIME_DIR and the API server port when it is imported, and this test process
imported it with a scratch state for the unit tests. So everything that talks to the cluster runs
in a subprocess with the environment from `<state>/env.sh`, and with the real home directory:
the login node's ssh config (`~/.slurm/config`) and `download_logs`' `~/sky_logs` live there.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("AUTORESEARCH_SLURM_STATE", "/var/lib/autoresearch-slurm"))
ENV_FILE = STATE / "env.sh"


def read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """The `export K=V ...` lines up.sh writes (plain values, no quoting)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            for item in line.removeprefix("export ").split():
                key, sep, value = item.partition("=")
                if sep:
                    env[key] = value
    return env


def unreachable() -> str | None:
    """Why the local Slurm cluster cannot be used, or None when it can."""
    if not ENV_FILE.is_file():
        return f"{ENV_FILE} missing: run scripts/slurm/up.sh"
    port = int(read_env_file().get("AUTORESEARCH_SLURM_SSH_PORT", "2222"))
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


def require_cluster() -> dict[str, str]:
    """The environment for subprocesses that use the cluster; skip (fail under CI) without one."""
    reason = unreachable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"local Slurm cluster needed under CI: {reason}")
        pytest.skip(reason)
    env = dict(os.environ)
    env.update(read_env_file())
    env["HOME"] = pwd.getpwuid(os.getuid()).pw_dir
    env["PYTHONPATH"] = str(REPO)
    return env


def sky_query(env: dict[str, str], code: str, timeout: float = 300) -> Any:
    """Run `code` (which sets `result`) against the cluster's SkyPilot; its result as JSON."""
    script = "import json, sky\n" + code + "\nprint('RESULT ' + json.dumps(result, default=str))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"sky query failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def cluster_names(env: dict[str, str], names: list[str]) -> list[str]:
    """Which of these clusters SkyPilot still has (refreshed from Slurm)."""
    found: list[str] = sky_query(
        env,
        f"result = [r['name'] for r in sky.get(sky.status({names!r}, refresh=sky.StatusRefreshMode.FORCE))]",
    )
    return found


def slurm_jobs_of_login_user() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %j %u %T"], capture_output=True, text=True, timeout=30)
    user = os.environ.get("AUTORESEARCH_SLURM_USER", "arslurm")
    return [line for line in out.stdout.splitlines() if f" {user} " in f" {line} "]


def preempt(cluster: str) -> None:
    """End the Slurm allocation behind a SkyPilot cluster, as a preemption would."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, timeout=30, check=True
    )
    ids = [line.split()[0] for line in out.stdout.splitlines() if line.split()[1].startswith(cluster + "-")]
    assert ids, f"no Slurm allocation for {cluster}: {out.stdout}"
    subprocess.run(["scancel", *ids], check=True, timeout=30)
