"""The Runner: the stages in order, inside signal handling, and how the run ends."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kb.db import now, transaction
from kb.store import run_records
from runner.fleet import make_fleet
from runner.measure.common import (
    RunFailed,
    RunSummary,
    Stop,
)
from runner.measure.recovery import Recovery


class Runner(Recovery):
    """The Runner."""

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM behaves like Ctrl-C: stop this process cleanly, leaving the run resumable."""

        def raise_interrupt(_sig: int, _frame: object) -> None:
            raise KeyboardInterrupt

        try:
            previous: Any = signal.signal(signal.SIGTERM, raise_interrupt)
        except ValueError:  # not the main thread (tests drive runners from threads)
            previous = None
        try:
            yield
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def execute(self) -> RunSummary:
        """Run to the end (or until stopped, a budget is spent, or this process is interrupted)."""
        # This thread's own connection: the runner may be built in one thread and run in another.
        with contextlib.suppress(Exception):
            self.db.conn.close()
        self.db = self.ws.db()
        try:
            return self._execute()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _execute(self) -> RunSummary:
        with self._signals():
            try:
                self.fleet = make_fleet(self.backend, self.ws, self.db, self.run_id, self.parallel)
                workers = self.fleet.up()
                self._say(
                    f"run {self.name} ({self.branch}) from {self.baseline[:12]} on {self.backend} "
                    f"x{len(workers)}"
                )
                if self.resuming:
                    self._recover()
                self._finish("finished", stop=self._stages())
            except KeyboardInterrupt:
                self._interrupt()
                raise
            except RunFailed as exc:
                self._cancel_live("run failed")
                self._finish("failed", error=str(exc))
            except Exception as exc:
                # Anything unexpected leaves the run resumable rather than failed.
                self._interrupt(error=f"{type(exc).__name__}: {exc}")
                raise
        return self.summary()

    def _finish(self, status: str, *, stop: Stop | None = None, error: str | None = None) -> None:
        stopped_by = stop.words if stop else None
        assert self.fleet is not None
        for active in list(self.active.values()):
            self.fleet.cancel(active.ref)
        self.active.clear()
        self.fleet.down()
        with transaction(self.db):
            run = self._run()
            summary = json.loads(run["summary"] or "{}")
            if stopped_by:
                summary["stopped_by"] = stopped_by
            run_records.update(
                self.db,
                self.run_id,
                {
                    "status": status,
                    "stop_reason": stop.reason if stop else None,
                    "phase": None,
                    "ended_at": now(),
                    "error": error,
                    "summary": summary,
                    "head_commit": self.head(),
                    "cost_usd": self.fleet.cost_usd(),
                },
            )
            self._event(
                "run_" + status,
                f"run {self.name} {status}"
                + (f" ({stopped_by})" if stopped_by else "")
                + (f": {error}" if error else ""),
                level="info" if status == "finished" else "error",
                data={"stop_reason": stop.reason} if stop else None,
            )
        self._say(
            f"run {self.name} {status}"
            + (f" ({stopped_by})" if stopped_by else "")
            + (f": {error}" if error else "")
        )
