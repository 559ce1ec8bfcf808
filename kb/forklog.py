"""Parsing batched git output for forks: one `git log --raw --numstat -p` for thousands of commits,
and one `git diff --raw --numstat -p` for file-level comparisons, streamed with the diffs capped.

    for commit in parse_log(lines, per_file=100_000, per_commit=300_000, patches=handle): ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Self

from kb.gitrepo import unquote_path

NUMSTAT = re.compile(rb"^(\d+|-)\t(\d+|-)\t(.*)$")
_HEADER_FIELDS = 7  # sha, author, email, date, subject, body, and the empty rest after the last \x1f
LOG_FORMAT = "%x1e%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1f%b%x1f"
BODY_DIFF_CHARS = 6000
"""How much of the changed lines goes into the evidence body, so identifiers in code are searchable."""
_NULL = "0" * 40


@dataclass
class DiffText:
    """A diff kept within caps while it streams in: the kept parts, and what was cut."""

    diff_parts: list[bytes] = field(default_factory=list)
    diff_bytes: int = 0
    diff_truncated: bool = False
    truncated_files: list[str] = field(default_factory=list)

    @property
    def diff(self) -> str:
        return b"".join(self.diff_parts).decode("utf-8", "replace")

    def packed(self) -> Self:
        """The kept lines joined into one bytes object: a line is ~40 bytes of list and object
        overhead, and a mined fork's diffs stay in memory until they are written in one transaction."""
        self.diff_parts = [b"".join(self.diff_parts)] if len(self.diff_parts) > 1 else self.diff_parts
        return self


@dataclass
class MinedCommit(DiffText):
    sha: str = ""
    author: str = ""
    email: str = ""
    date: str = ""
    subject: str = ""
    body: str = ""
    files: list[str] = field(default_factory=list)
    insertions: int = 0
    deletions: int = 0
    binary_files: list[str] = field(default_factory=list)
    blobs: dict[str, str | None] = field(default_factory=dict)
    """Path -> the blob the commit leaves there (None: deleted), from `--raw`."""

    @property
    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".strip() + "\n" if self.body else self.subject + "\n"


class DiffCapper:
    """Keeps a diff within the caps while it streams; notes what was cut and why."""

    def __init__(self, target: DiffText, per_file: int, per_commit: int) -> None:
        self.target = target
        self.per_file = per_file
        self.per_commit = per_commit
        self.file_bytes = 0
        self.file_path = ""
        self.file_cut = False

    def add(self, line: bytes) -> None:
        target = self.target
        if line.startswith(b"diff --git "):
            self.file_bytes = 0
            self.file_cut = False
            self.file_path = line.rstrip(b"\n").split(b" b/", 1)[-1].decode("utf-8", "replace")
        if target.diff_truncated and target.diff_bytes >= self.per_commit:
            return
        if self.file_cut:
            return
        if self.file_bytes + len(line) > self.per_file:
            self.file_cut = True
            target.diff_truncated = True
            target.truncated_files.append(self.file_path)
            self._note(f"... [diff of {self.file_path} cut at {self.per_file:,} bytes]\n")
            return
        if target.diff_bytes + len(line) > self.per_commit:
            target.diff_truncated = True
            self._note(f"... [diff cut at {self.per_commit:,} bytes; later files left out]\n")
            target.diff_bytes = self.per_commit
            return
        target.diff_parts.append(line)
        target.diff_bytes += len(line)
        self.file_bytes += len(line)

    def _note(self, text: str) -> None:
        self.target.diff_parts.append(text.encode())


def raw_entry(line: bytes) -> tuple[str, str | None, str | None, str] | None:
    """(path, old blob, new blob, status letter) of a `--raw --no-abbrev` line; None for other lines."""
    if not line.startswith(b":"):
        return None
    meta, _, path = line.rstrip(b"\n").partition(b"\t")
    parts = meta.decode("ascii", "replace").split()
    if len(parts) < 5 or not path:
        return None
    old, new = parts[2], parts[3]
    return unquote_path(path), None if old == _NULL else old, None if new == _NULL else new, parts[4][:1]


def parse_log(
    lines: Iterable[bytes], *, per_file: int, per_commit: int, patches: IO[bytes] | None = None
) -> Iterator[MinedCommit]:
    """Commits from `git log --format=<LOG_FORMAT> [--raw --no-abbrev] --numstat -p`, streamed.

    With `patches`, each commit's full (uncapped) diff is also written there under a `commit <sha>`
    line, the input `git patch-id` expects."""
    commit: MinedCommit | None = None
    capper: DiffCapper | None = None
    header: bytes | None = None
    in_diff = False
    for line in lines:
        if line.startswith(b"\x1e"):
            if commit is not None:
                yield commit.packed()
            commit, capper, in_diff = None, None, False
            header = line[1:]
        elif header is not None:
            header += line
        if header is not None:
            if header.count(b"\x1f") < _HEADER_FIELDS - 1:
                continue
            sha, author, email, date, subject, body, _ = (
                part.decode("utf-8", "replace") for part in header.split(b"\x1f", _HEADER_FIELDS - 1)
            )
            commit = MinedCommit(
                sha=sha, author=author, email=email, date=date, subject=subject, body=body.strip()
            )
            capper = DiffCapper(commit, per_file, per_commit)
            header = None
            if patches is not None:
                patches.write(b"commit " + sha.encode() + b"\n")
            continue
        if commit is None or capper is None:
            continue
        if in_diff or line.startswith(b"diff --git "):
            in_diff = True
            capper.add(line)
            if patches is not None:
                patches.write(line)
            continue
        raw = raw_entry(line)
        if raw is not None:
            commit.blobs[raw[0]] = raw[2]
            continue
        match = NUMSTAT.match(line.rstrip(b"\n"))
        if match:
            path = unquote_path(match.group(3))
            commit.files.append(path)
            if match.group(1) == b"-":
                commit.binary_files.append(path)
            else:
                commit.insertions += int(match.group(1))
                commit.deletions += int(match.group(2))
    if commit is not None:
        yield commit.packed()


def changed_lines(diff: str, limit: int = BODY_DIFF_CHARS) -> str:
    """The added and removed lines of a diff, each file announced by `== path`, up to `limit` chars."""
    changed: list[str] = []
    size = 0
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            text = "== " + line.split(" b/", 1)[-1]
        elif line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        else:
            text = line
        size += len(text) + 1
        if size > limit:
            changed.append("…")
            break
        changed.append(text)
    return "\n".join(changed)


def evidence_body(commit: MinedCommit, fork: str) -> str:
    """What search sees of a commit: its message, the files it touches, and its changed lines."""
    files = "\n".join(f"{path} (binary)" if path in commit.binary_files else path for path in commit.files)
    parts = [
        commit.subject,
        commit.body,
        f"Fork {fork}, commit {commit.sha[:12]} by {commit.author}",
        f"Files:\n{files}" if files else "",
        changed_lines(commit.diff),
    ]
    return "\n\n".join(p for p in parts if p)
