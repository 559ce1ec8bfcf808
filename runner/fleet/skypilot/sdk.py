"""The SkyPilot SDK adapter: the only module of the fleet that imports `sky` (tests/foundation checks).

`import sky` takes seconds, so it happens lazily, on the first call that needs it, after switching
SkyPilot's telemetry off unless the environment already decided (SKYPILOT_DISABLE_USAGE_COLLECTION,
DO_NOT_TRACK, SCARF_NO_ANALYTICS; the local API server inherits them when the first call starts it).
SkyPilot reads its own settings (SKY_RUNTIME_DIR, SKYPILOT_GLOBAL_CONFIG, the API server port) when
it is imported: they belong in the environment before the runner starts.

Every call runs `quiet()`: SkyPilot prints progress on stdout, which belongs to the runner. Slow
calls (launch, exec, job status, down, status) are requests: these functions return the request id,
and `request_status`/`result` look at it again later, so nothing here waits for a cluster.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import shutil
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kb.errors import UserError
from runner.fleet.base import JobState

TELEMETRY_OFF = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "DO_NOT_TRACK": "1", "SCARF_NO_ANALYTICS": "1"}
REQUEST_DONE = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "MISSING"})
"""Request states after which `sky.get` answers at once (MISSING: the server forgot it; get raises)."""
JOB_STATES: dict[str, JobState] = {
    "INIT": "pending",
    "PENDING": "pending",
    "SETTING_UP": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "FAILED_SETUP": "failed",
    "FAILED_DRIVER": "failed",
    "CANCELLED": "cancelled",
}
"""A SkyPilot cluster job's status as the fleet's job state."""
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- sky, quietly ----------------------------------------------------------------------------------


def sky_module() -> ModuleType:
    """`sky`, imported on first use with telemetry off unless the environment says otherwise."""
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    try:
        import sky
    except ImportError as exc:
        raise UserError(f"backend 'skypilot': SkyPilot cannot be imported ({exc})") from None
    return sky


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """SkyPilot prints progress on stdout, which belongs to the runner (its progress, --json)."""
    from sky import sky_logging

    with contextlib.redirect_stdout(io.StringIO()), sky_logging.silent():
        yield


def error_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, without colours."""
    text = _ANSI.sub("", str(exc)).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def status_value(status: Any) -> str:
    """An enum member's value (SkyPilot's statuses), or the text itself."""
    return str(getattr(status, "value", status))


def job_finished(status: Any) -> bool:
    """Is this cluster job status one the job never leaves?"""
    return status_value(status) in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED")


# --- tasks -------------------------------------------------------------------------------------------


def resources(spec: dict[str, Any]) -> Any:
    """`sky.Resources` from a `resources:` mapping (raises what SkyPilot raises on a bad one)."""
    sky = sky_module()
    with quiet():
        return sky.Resources.from_yaml_config(copy.deepcopy(spec))


def task(config: dict[str, Any]) -> Any:
    """A validated `sky.Task` from a task YAML mapping (raises what SkyPilot raises on a bad one)."""
    sky = sky_module()
    with quiet():
        made = sky.Task.from_yaml_config(copy.deepcopy(config))
        made.validate()
    return made


# --- requests ------------------------------------------------------------------------------------------


def request_status(request: str) -> str:
    """PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED; MISSING when the server forgot it."""
    sky = sky_module()
    with quiet():
        found = sky.api_status([request], fields=["request_id", "status"])
    return status_value(found[0].status) if found else "MISSING"


def result(request: str) -> Any:
    """A finished request's result (`sky.get`; raises the request's error)."""
    sky = sky_module()
    with quiet():
        return sky.get(request)


def cancel_request(request: str) -> None:
    """Cancel a request, best effort (it may have finished meanwhile)."""
    sky = sky_module()
    with contextlib.suppress(Exception), quiet():
        sky.get(sky.api_cancel(request, silent=True))


def cancel_stray_execs(cluster: str, keep: Collection[str]) -> None:
    """Cancel the cluster's exec requests that are not in `keep` (best effort)."""
    sky = sky_module()
    with contextlib.suppress(Exception), quiet():
        for request in sky.api_status(cluster_name=cluster):
            if request.name == "sky.exec" and request.request_id not in keep:
                sky.get(sky.api_cancel(request.request_id, silent=True))


# --- clusters and their jobs ------------------------------------------------------------------------------


def launch(made: Any, cluster: str) -> str:
    """Send `sky.launch` of a task onto a new cluster; the request id."""
    sky = sky_module()
    with quiet():
        return str(sky.launch(made, cluster_name=cluster))


def execute(made: Any, cluster: str) -> str:
    """Send `sky.exec` of a task on an up cluster (no setup, the workdir synced); the request id."""
    sky = sky_module()
    with quiet():
        return str(sky.exec(made, cluster_name=cluster))


def job_status(cluster: str, job_ids: Sequence[int]) -> str:
    """Send a status request for jobs of a cluster; its result maps job id -> status."""
    sky = sky_module()
    with quiet():
        return str(sky.job_status(cluster, list(job_ids)))


def cancel_jobs(cluster: str, job_ids: Sequence[int]) -> None:
    """Cancel jobs of a cluster and wait until they are over (best effort)."""
    sky = sky_module()
    with contextlib.suppress(Exception), quiet():
        sky.get(sky.cancel(cluster, job_ids=list(job_ids)))


def queue(cluster: str) -> list[dict[str, Any]]:
    """The cluster's job queue (waits for the answer; raises when the cluster cannot be asked)."""
    sky = sky_module()
    with quiet():
        entries: list[dict[str, Any]] = sky.get(sky.queue(cluster))
    return entries


def run_log(cluster: str, job_id: int) -> bytes | None:
    """A job's clean run output (`tasks/run.log`); the downloaded copy is removed after."""
    sky = sky_module()
    try:
        with quiet():
            paths = sky.download_logs(cluster, [str(job_id)])
        # The path comes with a literal '~': the API server's home, which is this user's.
        folder = Path(os.path.expanduser(paths[str(job_id)]))
        data = (folder / "tasks" / "run.log").read_bytes()
    except Exception:  # noqa: BLE001 - the caller decides what a missing log means
        return None
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()
    return data


def clusters(names: Sequence[str], *, refresh: bool) -> list[dict[str, Any]]:
    """SkyPilot's records of these clusters (`refresh`: asked from the infra); missing ones absent."""
    sky = sky_module()
    with quiet():
        request = (
            sky.status(list(names), refresh=sky.StatusRefreshMode.FORCE)
            if refresh
            else sky.status(list(names))
        )
        records: list[dict[str, Any]] = sky.get(request)
    return records


def cluster_gone(cluster: str) -> bool:
    """Ask the infra (refreshing SkyPilot's record): is the cluster missing or not UP?"""
    sky_module()  # SkyPilot missing is a UserError, not an unknown answer
    try:
        records = clusters([cluster], refresh=True)
    except Exception:  # noqa: BLE001 - unknown: not proof that it is gone
        return False
    return not records or status_value(records[0]["status"]) != "UP"


def down(cluster: str) -> str:
    """Send `sky.down` of a cluster; the request id."""
    sky = sky_module()
    with quiet():
        return str(sky.down(cluster))


def down_outcome(request: str) -> str:
    """`done`, or `failed: <reason>`, for a finished `sky.down` request (an already gone cluster is done)."""
    try:
        result(request)
    except Exception as exc:  # noqa: BLE001
        if type(exc).__name__ != "ClusterDoesNotExist":
            return f"failed: {error_line(exc)}"
    return "done"


def cost_report(days: int) -> list[dict[str, Any]]:
    """SkyPilot's cost report of the clusters of the last `days` days (raises when unavailable)."""
    sky = sky_module()
    with quiet():
        report: list[dict[str, Any]] | None = sky.get(sky.cost_report(days=days))
    return report or []
