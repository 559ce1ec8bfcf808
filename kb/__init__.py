"""The knowledge base: the workspace database, its migrations, ingestion and search.

`kb` imports neither `runner` nor `tui` (enforced by import-linter and tests/test_import_hygiene.py).
"""
