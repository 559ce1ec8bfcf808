"""Widgets of the Textual app, grouped by the screen region they serve."""
