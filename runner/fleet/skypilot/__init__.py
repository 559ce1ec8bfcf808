"""The SkyPilot fleet: experiment batches on SkyPilot clusters (clouds, Kubernetes, Slurm).

- `sdk`: the SkyPilot SDK adapter, the only module that imports `sky` (lazily, telemetry off).
- `tasks`: task shaping: `resources:`, the task as sent (name, sync prelude), the workdir manifest.
- `common`: what every part shares: `FleetScope` (the workspace, settings, database, run and its
  `workers` rows) and `FleetEvents` (events; SkyPilot hiccups reported once, retried next tick).
- `teardown`: `Teardown`: failed and lost workers, `sky.down` requests, orphaned and vanished clusters.
- `costs`: `CostMeter`: worker and experiment costs, SkyPilot's cost report, the run's dollar budget.
- `qualify`: `Qualifier`: the A/A qualification job of a new cluster and the noise read from its log.
- `launch`: `Launcher`: new workers, staggered `sky.launch`, the launch request followed to qualifying.
- `pool`: `WorkerPool`: the first workers, those added while work waits, idle clusters downed,
  giving up after failures in a row.
- `jobs`: `JobTracker`: batches (`sky.exec`), their polling, logs, cancel and reattach after a restart.
- `fleet`: `SkyPilotFleet(Fleet)`: holds the parts above (each given its collaborators) and drives
  them (up, tick, down; jobs go to the tracker).
- `cli`: what `autoresearch fleet` needs: cluster statuses, downing recorded clusters.

Importing this package never imports `sky`; the first SkyPilot call does.
"""

from __future__ import annotations

from runner.fleet.skypilot.cli import cluster_statuses, down_workers
from runner.fleet.skypilot.common import CHECK_ERRORS, GONE, LIVE, TICK_SECONDS, FleetEvents, FleetScope
from runner.fleet.skypilot.costs import CostMeter
from runner.fleet.skypilot.fleet import SkyPilotFleet
from runner.fleet.skypilot.jobs import LOG_SECONDS, POLL_SECONDS, JobTracker, _Job
from runner.fleet.skypilot.launch import Launcher
from runner.fleet.skypilot.pool import WorkerPool
from runner.fleet.skypilot.qualify import QUALIFY_MARGIN_SECONDS, Qualifier, qualification_noise
from runner.fleet.skypilot.sdk import REQUEST_DONE, TELEMETRY_OFF, error_line, quiet, sky_module
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
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS, Teardown

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
    "CostMeter",
    "FleetEvents",
    "FleetScope",
    "JobTracker",
    "Launcher",
    "Qualifier",
    "SkyPilotFleet",
    "Teardown",
    "WorkerPool",
    "_Job",
    "check_resources",
    "cluster_statuses",
    "down_workers",
    "error_line",
    "for_cluster",
    "qualification_noise",
    "quiet",
    "resources_config",
    "sky_module",
    "sky_task",
    "sync_prelude",
    "task_name",
    "tree_id",
    "write_manifest",
]
