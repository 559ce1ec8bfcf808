"""A diff reduced to the change it makes, for novelty: two patches that differ only in their
headers, hunk positions, context lines, the amount of context or whitespace make the same change
and get the same `normalized_sha` (patches.norm_sha). The autopilot does not measure an idea twice
in a workspace; a model that rewrites a discarded patch with other context is still caught."""

from __future__ import annotations

import hashlib
import re

_SPACE = re.compile(r"\s+")


def _path(header: str) -> str:
    name = header[4:].split("\t", 1)[0].strip()
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def normalized(diff: str) -> str:
    """Per file (sorted by path): its removed and added lines, whitespace collapsed, in order."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    old_name = ""
    for line in diff.splitlines():
        if line.startswith("--- "):
            old_name = _path(line)
            continue
        if line.startswith("+++ "):
            name = _path(line)
            current = files.setdefault(old_name if name == "/dev/null" else name, [])
            continue
        if current is None or line.startswith(("@@", "diff ", "index ", "\\")):
            continue
        if line[:1] in ("+", "-"):
            text = _SPACE.sub(" ", line[1:]).strip()
            if text:
                current.append(line[0] + text)
    return "\n".join(f"{name}\n" + "\n".join(changes) for name, changes in sorted(files.items()) if changes)


def normalized_sha(diff: str) -> str:
    return hashlib.sha256(normalized(diff).encode()).hexdigest()
