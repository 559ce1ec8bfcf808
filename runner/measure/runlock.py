"""One run per workspace at a time: an OS file lock held by the process that drives a run.

`acquire(ws)` takes an exclusive `flock` on `<workspace>/run.lock` for as long as the process lives
(or until `release`): two `autoresearch run` started at the same instant cannot both get it, on one
host or on several sharing the folder, and a runner killed with -9 lets it go with its process (the
kernel drops the lock; no stale state to clean). The holder writes who it is (pid, host, then the
run's id and name) into the file, so the other one can say which run is going.

Within one process (tests drive several runners from threads) the lock is shared, counted, and the
database decides as before (runner/measure/'s check and insert run in one BEGIN IMMEDIATE write).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kb.errors import UserError
from kb.jsoncol import decoded_dict

LOCK_NAME = "run.lock"
NAME_WAIT_SECONDS = 5.0
"""How long the process that lost waits for the winner to record which run it drives."""

_held: dict[Path, _Held] = {}
_guard = threading.Lock()


@dataclass
class _Held:
    handle: IO[str]
    count: int = 0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunLock:
    """This process's hold on a workspace's run lock (release it once)."""

    path: Path
    released: bool = False

    def record(self, run_id: int, name: str) -> None:
        """Say in the lock file which run this process drives."""
        with _guard:
            held = _held.get(self.path)
            if held is not None:
                held.info.update(run=run_id, name=name)
                _write(held.handle, held.info)

    def release(self) -> None:
        with _guard:
            if self.released:
                return
            self.released = True
            held = _held.get(self.path)
            if held is None:
                return
            held.count -= 1
            if held.count <= 0:
                del _held[self.path]
                with contextlib.suppress(OSError):
                    held.handle.truncate(0)
                held.handle.close()  # closing the descriptor drops the flock


def acquire(root: Path, wait: float = NAME_WAIT_SECONDS) -> RunLock:
    """The workspace's run lock, or UserError naming the run another process drives."""
    path = (root / LOCK_NAME).resolve()
    deadline = time.monotonic() + wait
    while True:
        with _guard:
            held = _held.get(path)
            if held is not None:
                held.count += 1
                return RunLock(path)
            handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - kept open: it holds the lock
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
            else:
                info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
                _held[path] = _Held(handle, 1, info)
                _write(handle, info)
                return RunLock(path)
        holder = _holder(path)
        if holder.get("name") or time.monotonic() >= deadline:
            raise UserError(_busy(root, holder))
        time.sleep(0.1)  # the winner is still creating its run: wait to name it (or for the lock)


def check_free(root: Path, wait: float = NAME_WAIT_SECONDS) -> None:
    """Refuse, in `acquire`'s words, when another process drives a run here; else return at once
    (the lock is taken and let go: what starts a runner in another process, `run --detach`, asks
    first, so a refusal reaches the person who asked rather than the detached runner's log)."""
    acquire(root, wait).release()


def _write(handle: IO[str], info: dict[str, Any]) -> None:
    handle.seek(0)
    handle.truncate(0)
    handle.write(json.dumps(info) + "\n")
    handle.flush()


def _holder(path: Path) -> dict[str, Any]:
    try:
        data = decoded_dict(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _busy(root: Path, holder: dict[str, Any]) -> str:
    who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
    if holder.get("name"):
        return f"run {holder['name']} is going ({who}): wait for it, stop it, or use another workspace"
    return f"{root}: another runner ({who}) holds the workspace: wait for it, or use another workspace"
