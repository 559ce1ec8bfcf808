"""The SkyPilot fleet: experiment batches on SkyPilot clusters (clouds, Kubernetes, Slurm).

- `sdk`: the SkyPilot SDK adapter, the only module that imports `sky` (lazily, telemetry off).
- `tasks`: task shaping: `resources:`, the task as sent (name, sync prelude), the workdir manifest.
- `state`: the fleet's shared state and small helpers on its `workers` rows and events.
- `teardown`: failed and lost workers, `sky.down` requests, orphaned and vanished clusters.
- `costs`: worker and experiment costs, SkyPilot's cost report, the run's dollar budget.
- `qualify`: the A/A qualification job of a new cluster and the noise read from its log.
- `launch`: new workers, staggered `sky.launch`, the launch request followed to qualifying.
- `scaling`: workers added while work waits, idle clusters downed, giving up after failures.
- `jobs`: batches (`sky.exec`), their polling, logs, cancel and reattach after a restart.
- `fleet`: `SkyPilotFleet` (up, tick, down), the mixins above put together.
- `cli`: what `autoresearch fleet` needs: run liveness, cluster statuses, downing clusters.

Importing this package never imports `sky`; the first SkyPilot call does.
"""

from __future__ import annotations

from runner.fleet.skypilot.cli import cluster_statuses, down_workers, run_is_live
from runner.fleet.skypilot.fleet import SkyPilotFleet
from runner.fleet.skypilot.jobs import LOG_SECONDS, POLL_SECONDS, _Job
from runner.fleet.skypilot.qualify import QUALIFY_MARGIN_SECONDS, qualification_noise
from runner.fleet.skypilot.sdk import REQUEST_DONE, TELEMETRY_OFF, error_line, quiet, sky_module
from runner.fleet.skypilot.state import CHECK_ERRORS, GONE, LIVE, TICK_SECONDS
from runner.fleet.skypilot.tasks import (
    DEFAULT_ORIGIN,
    MANIFEST,
    SYNC_PRELUDE,
    check_resources,
    for_cluster,
    resources_config,
    sky_task,
    sync_prelude,
    task_name,
    tree_id,
    write_manifest,
)
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS

__all__ = [
    "CHECK_ERRORS",
    "DEFAULT_ORIGIN",
    "DOWN_WAIT_SECONDS",
    "GONE",
    "LIVE",
    "LOG_SECONDS",
    "MANIFEST",
    "POLL_SECONDS",
    "QUALIFY_MARGIN_SECONDS",
    "REQUEST_DONE",
    "SYNC_PRELUDE",
    "TELEMETRY_OFF",
    "TICK_SECONDS",
    "SkyPilotFleet",
    "_Job",
    "check_resources",
    "cluster_statuses",
    "down_workers",
    "error_line",
    "for_cluster",
    "qualification_noise",
    "quiet",
    "resources_config",
    "run_is_live",
    "sky_module",
    "sky_task",
    "sync_prelude",
    "task_name",
    "tree_id",
    "write_manifest",
]
