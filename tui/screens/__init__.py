"""Screens of the Textual app: one per pane, and the views and dialogs pushed on them."""
