"""The workspace database as the console opens it: a connection per session, per thread.

kb.db imports sqlite_utils, which imports pandas when it is installed (0.2-0.7 s): the app must
paint before that, so this module reaches kb.db only from inside functions (run in workers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils


DB_NAME = "autoresearch.db"  # kb.db.DB_NAME (a test checks they agree)


# kb.db imports sqlite_utils, which imports pandas when it is installed (0.2-0.7 s): the app must
# paint before that, so this module reaches kb.db only from inside functions (run in workers).


def connect(path: Path, *, migrate_schema: bool = True) -> sqlite_utils.Database:
    """The workspace's database, which must exist (the console never creates one)."""
    from kb.db import connect as kb_connect

    return kb_connect(path, migrate_schema=migrate_schema, create=False)


def transaction(db: sqlite_utils.Database) -> AbstractContextManager[sqlite_utils.Database]:
    from kb.db import transaction as kb_transaction

    return kb_transaction(db)


def log_event(db: sqlite_utils.Database, kind: str, message: str) -> int:
    from kb.db import log_event as kb_log_event

    return kb_log_event(db, kind, message)


class Store:
    """The workspace database as the TUI sees it: a new connection per session, per thread."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._migrated = False
        self._lock = threading.Lock()
        self._require_approval: bool | None = None

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def name(self) -> str:
        return self.root.name

    @contextmanager
    def session(self) -> Iterator[sqlite_utils.Database]:
        """A connection for the calling thread, closed afterwards. The first one brings the schema
        up to date (in a worker, so the app paints first); the others wait for it."""
        if not self._migrated:
            with self._lock:
                if not self._migrated:
                    connect(self.db_path).conn.close()
                    self._migrated = True
        db = connect(self.db_path, migrate_schema=False)
        try:
            yield db
        finally:
            db.conn.close()

    def require_approval(self) -> bool:
        """The config's hypotheses.require_approval: what a run's approval switch is when no one
        set it. Read once (a console restarts to see a new config, as for the policy)."""
        if self._require_approval is None:
            from kb.config import load_settings

            self._require_approval = load_settings(
                self.root / "autoresearch.toml"
            ).hypotheses.require_approval
        return self._require_approval

    def fallback_policy(self) -> dict[str, Any]:
        """The config's policy and metric, for runs whose stored policy lacks a key (as the CLI)."""
        from kb.config import load_settings
        from runner.record.redecide import fallback_policy

        return fallback_policy(load_settings(self.root / "autoresearch.toml"))
