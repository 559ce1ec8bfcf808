"""Pages of a large table (LIMIT/OFFSET with the total), and small row helpers the stores share."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    import sqlite3

    import sqlite_utils

T = TypeVar("T")
R = TypeVar("R")

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


def like(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching values that contain `text`."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class ShapeMismatch(RuntimeError):
    """A query's columns are not its row type's keys: the SQL or the TypedDict drifted (a bug)."""


_SHAPE_KEYS: dict[object, frozenset[str]] = {}


def _keys_of(shape: object) -> frozenset[str]:
    keys = _SHAPE_KEYS.get(shape)
    if keys is None:
        required: frozenset[str] = getattr(shape, "__required_keys__", frozenset())
        optional: frozenset[str] = getattr(shape, "__optional_keys__", frozenset())
        keys = _SHAPE_KEYS[shape] = frozenset(required | optional)
    return keys


def shaped(db: sqlite_utils.Database, shape: Callable[..., R], sql: str, params: Any = ()) -> list[R]:
    """A query's rows as the TypedDict `shape` (mypy then checks every key a caller reads).

    The query's column names must be the shape's keys, no more and no fewer: that is checked on
    the cursor's description, so it holds with no rows too, and a migration or a SELECT that
    drifts from its row type fails the first test that runs it (ShapeMismatch) instead of handing
    a caller a key its type says is missing."""
    cursor = db.execute(sql, params)
    names = _checked_names(cursor, shape)
    return [cast(R, dict(zip(names, r, strict=True))) for r in cursor.fetchall()]


def shaped_iter(
    db: sqlite_utils.Database, shape: Callable[..., R], sql: str, params: Any = ()
) -> Iterator[R]:
    """`shaped`'s rows one at a time, from the cursor (a large read is not held together); the
    query runs, and its columns are checked, when the first row is asked for."""
    cursor = db.execute(sql, params)
    names = _checked_names(cursor, shape)
    for values in cursor:
        yield cast(R, dict(zip(names, values, strict=True)))


def _checked_names(cursor: sqlite3.Cursor, shape: object) -> list[str]:
    """The cursor's column names, which must be the shape's keys (ShapeMismatch otherwise)."""
    names = [d[0] for d in cursor.description]
    keys = _keys_of(shape)
    if len(names) != len(keys) or set(names) != keys:
        missing = sorted(keys - set(names))
        extra = sorted(set(names) - keys)
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise ShapeMismatch(
            f"{getattr(shape, '__name__', shape)}: query columns differ from the row type"
            f" (missing {missing}, extra {extra}, repeated {repeated})"
        )
    return names


def shaped_one(db: sqlite_utils.Database, shape: Callable[..., R], sql: str, params: Any = ()) -> R | None:
    """The first row of `shaped`, or None."""
    found = shaped(db, shape, sql, params)
    return found[0] if found else None


def rows(db: sqlite_utils.Database, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    from kb.db import rows as kb_rows

    return kb_rows(db, sql, params)


def one(db: sqlite_utils.Database, sql: str, params: Any = ()) -> dict[str, Any] | None:
    from kb.db import one as kb_one

    return kb_one(db, sql, params)
