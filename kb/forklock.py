"""One fork ingestion at a time per workspace (issue 29).

Two `kb add-fork` of one fork started together each found no fork of that name, fetched it, and
the second failed on the database's unique name with a traceback. The mirror's refs and the
fork's rows are written by one process at a time: the other waits for an OS file lock
(`<workspace>/forks.lock`, dropped by the kernel when its holder dies, even by -9), then finds
the fork recorded and refreshes it (new commits only): both end as one `add-fork` then a refresh.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from kb.errors import UserError

LOCK_NAME = "forks.lock"


@contextlib.contextmanager
def fork_lock(root: Path) -> Iterator[None]:
    """Hold the workspace's fork lock (waiting for another holder to finish)."""
    path = root / LOCK_NAME
    try:
        handle = open(path, "a")  # noqa: SIM115 (held across the yield)
    except OSError as exc:
        raise UserError(f"{path}: cannot open the fork lock ({exc.strerror})") from None
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
