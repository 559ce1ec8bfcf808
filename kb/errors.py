"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or state, described in one line that names the input and the reason."""


class ConfigError(UserError):
    """autoresearch.toml is missing, unreadable or invalid."""


class WorkspaceNotFound(UserError):
    """No workspace was given and none was found from the current folder upwards."""
