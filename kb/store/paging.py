"""Pages of a large table (LIMIT/OFFSET with the total), and small row helpers the stores share."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import sqlite_utils

T = TypeVar("T")

PAGE_SIZE = 200


@dataclass(frozen=True)
class Page(Generic[T]):
    rows: list[T]
    offset: int
    limit: int
    total: int

    @property
    def has_next(self) -> bool:
        return self.offset + len(self.rows) < self.total

    @property
    def has_previous(self) -> bool:
        return self.offset > 0


def clamp_offset(offset: int, total: int, limit: int) -> int:
    """A valid page start: within [0, last page]."""
    if total <= 0:
        return 0
    last = (total - 1) // limit * limit
    return max(0, min(offset, last))


def count(db: sqlite_utils.Database, sql: str, params: Sequence[Any] = ()) -> int:
    return int(db.execute(sql, list(params)).fetchone()[0])


def version(db: sqlite_utils.Database) -> int:
    """PRAGMA data_version: moves when another connection commits (kb.db.data_version)."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


def loads(text: Any) -> Any:
    """A JSON column's value; text that is not JSON comes back as it is."""
    if not isinstance(text, str) or not text:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def like(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching values that contain `text`."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def rows(db: sqlite_utils.Database, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    from kb.db import rows as kb_rows

    return kb_rows(db, sql, params)


def one(db: sqlite_utils.Database, sql: str, params: Any = ()) -> dict[str, Any] | None:
    from kb.db import one as kb_one

    return kb_one(db, sql, params)
