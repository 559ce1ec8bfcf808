"""The data layer: the workspace database's reads and writes, one module per table group.

The faces (`tui/`, the CLI) hold no SQL: they call these functions and get frozen dataclasses
back. The measuring loop (runner/measure), the importer and the test fixtures write runs
(`run_records`), waves, experiments, jobs, samples and decisions through here too, so a schema
change is made once: rows go in as TypedDicts named after their table (`NewRun`, `NewExperiment`,
...; columns left out take the table's defaults) and updates as partial ones (`RunUpdate`, ...).
The one rule for an experiment's decision is `decisions.latest`. The history's read model
(`history`), the provenance chain (`provenance`), the research phase's reads (`research`) and the
hypothesis queue (`queue`) live here too; runner/record turns their rows into the runner's
records. kb imports neither runner nor tui.

No function here opens a transaction: the caller's `kb.db.transaction` decides what is written
together (the loop ends a job and records its decision as one).

Modules here reach kb.db (and so sqlite_utils) only inside functions: the TUI imports them before
it paints (tests/foundation/test_import_hygiene.py).
"""
