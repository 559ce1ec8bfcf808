"""The experiment itself: its trees, scripts, sandbox, task template and log protocol."""
