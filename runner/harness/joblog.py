"""Reading a job's log without holding it: what the runner parses, and the step logs it splits out.

A step's output is bounded (64 MiB, lines folded at 64 KiB: runner/harness/harness.sh), a job's
log is not: a batch of a few dozen invocations may hold a gigabyte, and a candidate that prints
one-byte lines makes every byte a line. Read whole and split, such a log takes the runner tens of
gigabytes (a runner resumed after a crash reads its jobs' logs from the start). Here a log is read
READ_CHUNK bytes at a time: memory stays bounded whatever the log holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from runner.harness.protocol import Invocation, LineSplitter, LogParser, Step

READ_CHUNK = 1 << 20
"""Bytes of a job log read (and parsed) at a time."""


def read_new(parser: LogParser, path: Path, offset: int) -> tuple[list[Invocation], int]:
    """Feed `parser` what `path` holds from byte `offset` up to its size now; (the invocations that
    completed, the new offset). A log that grows faster than it is parsed cannot keep this from
    returning; a missing one gives nothing."""
    found: list[Invocation] = []
    try:
        with open(path, "rb") as fh:
            end = os.fstat(fh.fileno()).st_size
            fh.seek(offset)
            while offset < end and (data := fh.read(min(READ_CHUNK, end - offset))):
                offset += len(data)
                found += parser.feed(data)
    except FileNotFoundError:
        pass
    return found, offset


def log_lines(fh: BinaryIO) -> Iterator[bytes]:
    """A job log's lines (without their newline) as LogParser numbers them: a line longer than
    MAX_LINE_BYTES in pieces, whatever chunks it arrives in."""
    lines = LineSplitter()
    while data := fh.read(READ_CHUNK):
        for piece, _ in lines.feed(data):
            yield piece
    for piece, _ in lines.finish():
        yield piece


def write_step_logs(path: Path, steps: Sequence[Step]) -> list[Path]:
    """One file per build and checks step next to the job log `path` (`build-B.log`, ...): the
    lines between the step's markers, streamed. The files written (none when the log is gone)."""
    wanted = [s for s in steps if not s.name.startswith("bench") and not s.cached and s.last_line is not None]
    if not wanted:
        return []
    written = [path.parent / f"{s.name}.log" for s in wanted]
    try:
        with contextlib.ExitStack() as files, open(path, "rb") as fh:
            spans = [
                (s.first_line, s.last_line or 0, files.enter_context(open(dest, "wb")))
                for s, dest in zip(wanted, written, strict=True)
            ]
            end = max(last for _, last, _ in spans)
            for number, line in enumerate(log_lines(fh), 1):
                if number >= end:
                    break
                for first, last, out in spans:
                    if first < number < last:
                        out.write(line + b"\n")
    except OSError:
        return []
    return written
