"""The faces: the command line (tui.cli) and the Textual app (tui.app)."""

import kb  # noqa: F401,E402  (first: kb keeps the sqlite-utils import light; see kb/__init__.py)
