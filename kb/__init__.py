"""The knowledge base: the workspace database, its migrations, ingestion and search.

`kb` imports neither `runner` nor `tui` (enforced by import-linter and tests/test_import_hygiene.py).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence


class _LightSqliteUtils(importlib.abc.MetaPathFinder):
    """Import sqlite-utils without its optional pandas/numpy support, whenever it is first imported.

    sqlite_utils.db imports pandas and numpy when they are installed (litellm and skypilot bring
    them) only to map their scalar types on insert, which this project never does; that costs
    ~0.3 s on every command. While sqlite_utils.db executes, the two are hidden so it takes its
    ImportError path; they are restored at once, so code that really needs them still gets them.
    Nothing is imported eagerly here: `autoresearch --help` and the TUI's first paint stay light.
    """

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "sqlite_utils.db":
            return None
        sys.meta_path.remove(self)  # one-shot: find the real spec, then wrap its loader
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            hidden = [m for m in ("pandas", "numpy") if m not in sys.modules]
            for m in hidden:
                sys.modules[m] = None  # type: ignore[assignment]
            try:
                real_exec(module)
            finally:
                for m in hidden:
                    del sys.modules[m]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if "sqlite_utils.db" not in sys.modules:
    sys.meta_path.insert(0, _LightSqliteUtils())
