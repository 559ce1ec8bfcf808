"""Which failures a user reads as one line, and the line: the one rule of every face.

The command line (tui/cli/lazy.py) prints the line and exits 1; the MCP server (tui/agents/) answers
the tool call with it as an error. Anything else is a bug and keeps its traceback (in the CLI's
terminal, in the MCP server's log), never in front of the user or the agent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from kb.errors import UserError
from kb.textsafe import inert


def user_line(exc: BaseException, database: Callable[[], Path | None]) -> str | None:
    """The one line for a failure the user can act on, or None for a bug: UserError (bad input or
    state), SQLite failures that are the environment's (a lock held too long, a read-only or full
    disk; `database()` names the file when it can), OS errors on a named file, and a number too
    large for SQLite that reached a query unchecked. The line is inert (kb/textsafe.py): it quotes
    file names, a server's reply, commit subjects, and a newline in them would forge a line."""
    line = _line(exc, database)
    return None if line is None else inert(line)


def _line(exc: BaseException, database: Callable[[], Path | None]) -> str | None:
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, sqlite3.Error):
        if not isinstance(exc, sqlite3.OperationalError) and type(exc) is not sqlite3.DatabaseError:
            return None  # integrity and programming errors are bugs
        from kb.db import explain_error

        path = database()
        return explain_error(exc, path) if path is not None else f"the workspace database: {exc}"
    if isinstance(exc, OSError):
        return None if exc.filename is None else f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, OverflowError) and "SQLite INTEGER" in str(exc):
        return f"a number given is too large for the database ({exc})"
    return None
