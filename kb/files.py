"""Reading files a user names, safely: only regular files, never more than a cap.

A path on the command line can be anything: a FIFO (reading blocks until a writer comes, forever),
/dev/zero or /dev/urandom (never end, and stat says size 0, so a size check before reading passes),
a folder, a socket. Every file the product reads on a user's behalf goes through here.
Stdlib and kb.errors only: the console's start-up path may import it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kb.errors import UserError

CHUNK = 64 * 1024
MAX_TEXT_BYTES = 64 * 1024 * 1024
"""The default cap on a text file a command reads (a patch, samples, a JSONL log)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular_file(path: Path, *, max_bytes: int, label: str | None = None) -> bytes:
    """The bytes of a regular file, at most `max_bytes` (checked while reading: a file that grows
    is stopped at the cap). Anything else (a folder, a FIFO, a device) is refused unread."""
    label = label or str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except FileNotFoundError:
        raise UserError(f"{label}: no such file") from None
    except OSError as exc:
        raise UserError(f"{label}: cannot read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{label}: {_kind(info.st_mode)}, not a regular file (only files are read)")
        if info.st_size > max_bytes:
            raise UserError(f"{label}: {info.st_size:,} bytes, over the size cap of {max_bytes:,} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(CHUNK, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UserError(f"{label}: over the size cap of {max_bytes:,} bytes (it grew while read)")
    except OSError as exc:
        raise UserError(f"{label}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: Path, *, max_bytes: int | None = None) -> str:
    """A UTF-8 text file the user named; a missing, undecodable or unreadable one, or one that is not
    a regular file (a FIFO, a device, a folder) or is over `max_bytes`, is a UserError."""
    data = read_regular_file(path, max_bytes=max_bytes or MAX_TEXT_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
