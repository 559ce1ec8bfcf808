"""The data layer: typed reads of the workspace database, one module per table group.

The faces (`tui/`, the CLI) hold no SQL: they call these functions and get frozen dataclasses
back. Queries with runner vocabulary (decisions, the queue's order) live in runner/record and
runner/queue_query instead; kb imports neither runner nor tui.

Modules here reach kb.db (and so sqlite_utils) only inside functions: the TUI imports them before
it paints (tests/foundation/test_import_hygiene.py).
"""
