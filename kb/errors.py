"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""

from pathlib import Path


class UserError(Exception):
    """Bad input or state, described in one line that names the input and the reason."""


class ConfigError(UserError):
    """autoresearch.toml is missing, unreadable or invalid."""


class WorkspaceNotFound(UserError):
    """No workspace was given and none was found from the current folder upwards."""


def read_text(path: Path) -> str:
    """A UTF-8 text file the user named; a missing, undecodable or unreadable one is a UserError."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror})") from None
