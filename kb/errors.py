"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""

from pathlib import Path


class UserError(Exception):
    """Bad input or state, described in one line that names the input and the reason."""


class ConfigError(UserError):
    """autoresearch.toml is missing, unreadable or invalid."""


class WorkspaceNotFound(UserError):
    """No workspace was given and none was found from the current folder upwards."""


def read_text(path: Path, *, max_bytes: int | None = None) -> str:
    """A UTF-8 text file the user named; a missing, undecodable or unreadable one, or one that is not
    a regular file (a FIFO, a device, a folder) or is over `max_bytes`, is a UserError."""
    from kb.files import MAX_TEXT_BYTES, read_regular_file

    data = read_regular_file(path, max_bytes=max_bytes or MAX_TEXT_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
