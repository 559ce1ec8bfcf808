"""JSON columns read back, one way everywhere: what the database stores as JSON text (meta, policy,
options, files, claims, ...) is decoded here and nowhere else.

On bad input the answer is always the same: NULL, empty text or text that is not JSON decodes to
None (`decoded`), or to the empty container the caller expects (`decoded_dict`, `decoded_list`), so
a damaged row reads as an empty one instead of crashing a view or passing raw text on as data."""

from __future__ import annotations

import json
from typing import Any


def decoded(text: Any) -> Any:
    """A JSON column's value: None for NULL, empty or unreadable text; a value that is not text
    (already decoded) as it is."""
    if text is None or text == "":
        return None
    if not isinstance(text, str | bytes):
        return text
    try:
        return json.loads(text)
    except ValueError:  # json.JSONDecodeError, UnicodeDecodeError, a nesting too deep for json
        return None
    except RecursionError:
        return None


def decoded_dict(text: Any) -> dict[str, Any]:
    """A JSON object column: {} unless it holds an object."""
    value = decoded(text)
    return value if isinstance(value, dict) else {}


def decoded_list(text: Any) -> list[Any]:
    """A JSON array column: [] unless it holds an array."""
    value = decoded(text)
    return value if isinstance(value, list) else []
