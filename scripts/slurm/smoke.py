"""Smoke test of the local Slurm cluster (scripts/slurm/up.sh) through SkyPilot's Python SDK.

Launches one tiny cluster whose job prints `METRIC x=1`, waits for the job, downloads its log,
runs a second job on the same cluster with `sky.exec`, then tears the cluster down. Prints one
JSON line with what it saw and how long each step took; exits non-zero on any failure.

    python scripts/slurm/smoke.py            # reads <state>/env.sh written by up.sh
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_STATE = "/var/lib/autoresearch-slurm"
TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"}
# Keep SkyPilot's own traffic home; must be set before `sky` is imported.
TELEMETRY_OFF = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "DO_NOT_TRACK": "1", "SCARF_NO_ANALYTICS": "1"}


def load_env_file(path: Path) -> dict[str, str]:
    """The `export K=V ...` assignments of the env file up.sh writes (plain values, no quoting)."""
    if not path.is_file():
        raise SystemExit(f"{path}: missing: run scripts/slurm/up.sh first")
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            for item in line.removeprefix("export ").split():
                key, sep, value = item.partition("=")
                if sep:
                    env[key] = value
    return env


def wait_for_job(cluster: str, job_id: int | None, timeout_s: float) -> str:
    """Polls `sky.job_status` until the job reaches a terminal status; returns its name."""
    import sky

    if job_id is None:  # launch/exec give None only for a dry run or a task without `run`
        raise RuntimeError(f"no job was submitted on {cluster}")
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = sky.get(sky.job_status(cluster, [job_id]))
        status = statuses.get(job_id)
        name = status.value if status is not None else "MISSING"
        if name in TERMINAL:
            return name
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} on {cluster} still {name} after {timeout_s:.0f}s")
        time.sleep(2)


def run_log(cluster: str, job_id: int | None) -> str:
    """The clean run output of a job (`<dir>/tasks/run.log`), its downloaded copy then removed.

    download_logs takes job ids as strings, blocks, and maps each id to a directory given as
    '~/sky_logs/<cluster>/<id>-<task>': a literal '~' meaning $HOME (not SKY_RUNTIME_DIR).
    """
    import sky

    paths = sky.download_logs(cluster, [str(job_id)])
    log_dir = Path(os.path.expanduser(paths[str(job_id)]))
    text = (log_dir / "tasks" / "run.log").read_text()
    shutil.rmtree(log_dir)
    with contextlib.suppress(OSError):  # the cluster's folder, once its last job's logs are gone
        log_dir.parent.rmdir()
    return text


def smoke(infra: str, cluster: str, job_timeout_s: float) -> dict[str, Any]:
    import sky

    result: dict[str, Any] = {"cluster": cluster, "infra": infra, "seconds": {}}
    seconds: dict[str, float] = result["seconds"]
    # A task's relative paths resolve against the cwd: never let them pick up the caller's tree.
    os.chdir(tempfile.mkdtemp(prefix="slurm-smoke-"))
    try:
        task = sky.Task(name="smoke", run='echo "METRIC x=1"; echo "EXPERIMENT_STATUS: done"')
        task.set_resources(sky.Resources(infra=infra, cpus=1, memory=1))
        t = time.monotonic()
        request_id = sky.launch(task, cluster_name=cluster)
        result["request_id_type"] = type(request_id).__name__
        job_id, _handle = sky.get(request_id)  # resolves once the job is submitted
        seconds["launch_submitted"] = round(time.monotonic() - t, 1)
        status = wait_for_job(cluster, job_id, job_timeout_s)
        seconds["launch_finished"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        result["launch"] = {"job_id": job_id, "status": status, "run_log": run_log(cluster, job_id)}
        seconds["download_logs"] = round(time.monotonic() - t, 1)

        exec_task = sky.Task(name="smoke-exec", run='echo "METRIC x=2"')
        t = time.monotonic()
        exec_job_id, _ = sky.get(sky.exec(exec_task, cluster_name=cluster))
        status = wait_for_job(cluster, exec_job_id, job_timeout_s)
        seconds["exec_finished"] = round(time.monotonic() - t, 1)
        result["exec"] = {"job_id": exec_job_id, "status": status, "run_log": run_log(cluster, exec_job_id)}
    finally:
        t = time.monotonic()
        sky.get(sky.down(cluster))
        seconds["down"] = round(time.monotonic() - t, 1)
    result["after_down"] = [r["name"] for r in sky.get(sky.status([cluster]))]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    state = Path(os.environ.get("AUTORESEARCH_SLURM_STATE", DEFAULT_STATE))
    parser.add_argument("--env-file", type=Path, default=state / "env.sh")
    parser.add_argument("--cluster", default=f"ar-smoke-{secrets.token_hex(2)}")
    parser.add_argument(
        "--job-timeout", type=float, default=600.0, help="seconds each job may take once submitted"
    )
    args = parser.parse_args(argv)

    os.environ.update(TELEMETRY_OFF)
    os.environ.update(load_env_file(args.env_file))
    t = time.monotonic()
    result = smoke(os.environ["AUTORESEARCH_SLURM_INFRA"], args.cluster, args.job_timeout)
    result["seconds"]["total"] = round(time.monotonic() - t, 1)
    print(json.dumps(result))
    ok = (
        result["launch"]["status"] == "SUCCEEDED"
        and result["exec"]["status"] == "SUCCEEDED"
        and "METRIC x=1" in result["launch"]["run_log"]
        and not result["after_down"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
