"""Where a tree keeps its compute backends: folders, files, the old layout's CPU code, and the config.

A tree is read as a list of paths (a folder on disk, or a commit of a git repository). For ggml
trees (no `kb.inventory.backends_root`) a backend is recognised, under the first of `ggml/src`,
`src` or the top that holds one:

- from a folder `ggml-<name>/` (llama.cpp since 2024: `ggml/src/ggml-cuda/`);
- from a file `ggml-<name>.<ext>` when `<name>` is a known backend or also has a folder
  (`ggml-metal.m`, `ggml-vulkan.cpp`, ik_llama.cpp's `ggml-cuda.cu` next to `ggml-cuda/`);
- for the CPU, when there is no `ggml-cpu` folder or file: the old layout's files (`ggml.c`,
  `ggml-quants.c`, `ggml-aarch64.c`, `iqk/`, `llamafile/`; `kb.inventory.old_layout_cpu`);
- from `kb.inventory.backend_paths` (backend -> files, folders or globs), which wins over the rest.

Other trees name a folder of backends (`backends_root`, with `backend_dir_pattern`) and may map
files the same way. `BackendMap.backend_of(path)` answers for any path, so fork commits are
classified by the same rules as the inventory.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kb.config import InventorySettings
from kb.inventory.model import Rule, ScanOptions

GGML_ROOTS = ("ggml/src", "src", "")
GGML_BACKEND_DIR = r"ggml-(?P<name>[A-Za-z0-9][\w-]*)"
_GGML_BACKEND_FILE = re.compile(r"ggml-(?P<name>[A-Za-z0-9][A-Za-z0-9_]*)\.\w+")


# --- source trees ------------------------------------------------------------------------------------


class Tree:
    """Files of a source tree by relative path (a folder on disk, or a commit of a git repository)."""

    label: str

    def paths(self) -> list[str]:
        raise NotImplementedError

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        raise NotImplementedError


class DirTree(Tree):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)

    def paths(self) -> list[str]:
        out: list[str] = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            rel = os.path.relpath(folder, self.root)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            out.extend(prefix + name for name in sorted(files))
        return out

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for rel in paths:
            try:
                out[rel] = (self.root / rel).read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
        return out


class GitTree(Tree):
    """A commit of a (bare) repository: one `ls-tree` for the paths, one `cat-file --batch` for the texts."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        from kb import gitrepo

        self.repo = gitrepo.open_repo(git_dir)
        self.commit = commit
        self.label = f"{git_dir}@{commit[:12]}"

    def paths(self) -> list[str]:
        from kb import gitrepo

        return gitrepo.list_files(self.repo, self.commit)

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        from kb import gitrepo

        return gitrepo.read_files(self.repo, self.commit, list(paths))


# --- which backend a path belongs to --------------------------------------------------------------


def _under(path: str, entry: str) -> bool:
    """`entry` is a file, a folder (`dir/`) or a glob, relative to the tree's top."""
    entry = entry.strip().removeprefix("./")
    if not entry:
        return False
    if any(c in entry for c in "*?["):
        return fnmatch.fnmatchcase(path, entry) or fnmatch.fnmatchcase(path, entry.rstrip("/") + "/*")
    entry = entry.rstrip("/")
    return path == entry or path.startswith(entry + "/")


@dataclass
class BackendMap:
    """The backend rules of one tree, decided once from its paths, then asked path by path."""

    settings: InventorySettings
    root: str
    """The backends folder (`ggml/src` for ggml trees; `""` is the tree's top)."""
    folder_backends: frozenset[str] = frozenset()
    old_layout_cpu: bool = False
    """No `ggml-cpu` folder or file: the CPU backend is the old layout's files."""

    @classmethod
    def for_paths(cls, paths: Sequence[str], settings: InventorySettings) -> BackendMap:
        """The rules for a tree with these paths (the first candidate root that holds a backend)."""
        roots = GGML_ROOTS if not settings.backends_root else (settings.backends_root.strip("/"),)
        sources = [p for p in paths if _is_source(p, settings.extensions)]
        fallback: BackendMap | None = None
        for root in roots:
            candidate = cls._at(root, sources, settings)
            if fallback is None:
                fallback = candidate
            if any(candidate.backend_of(p) for p in sources if p.startswith(candidate._prefix)):
                return candidate
        assert fallback is not None
        return fallback

    @classmethod
    def _at(cls, root: str, sources: Sequence[str], settings: InventorySettings) -> BackendMap:
        probe = cls(settings, root)
        folders = {name for p in sources if (name := probe._folder_backend(p))}
        has_cpu = "cpu" in folders or any(probe._file_backend(p, folders) == "cpu" for p in sources)
        ggml = not settings.backends_root
        return cls(settings, root, frozenset(folders), old_layout_cpu=ggml and not has_cpu)

    @property
    def _prefix(self) -> str:
        return f"{self.root}/" if self.root else ""

    def _folder_pattern(self) -> re.Pattern[str]:
        default = GGML_BACKEND_DIR if not self.settings.backends_root else r"(?P<name>[\w.-]+)"
        return _compiled(self.settings.backend_dir_pattern or default)

    def _folder_backend(self, path: str) -> str | None:
        if not path.startswith(self._prefix):
            return None
        rest = path[len(self._prefix) :].split("/")
        if len(rest) < 2:
            return None
        m = self._folder_pattern().fullmatch(rest[0])
        if m is None:
            return None
        return (m.groupdict().get("name") or m.group(0)).lower()

    def _file_backend(self, path: str, folders: Iterable[str]) -> str | None:
        """`ggml-metal.m`, `ggml-cuda.cu`: a file directly in the backends folder named after a backend."""
        if self.settings.backends_root or not path.startswith(self._prefix):
            return None
        rest = path[len(self._prefix) :]
        if "/" in rest:
            return None
        m = _GGML_BACKEND_FILE.fullmatch(rest)
        if m is None:
            return None
        name = m.group("name").lower()
        return name if name in folders or name in self.settings.known_backends else None

    def _old_cpu(self, path: str) -> bool:
        if not self.old_layout_cpu or not path.startswith(self._prefix):
            return False
        rest = path[len(self._prefix) :]
        return any(_under(rest, entry) for entry in self.settings.old_layout_cpu)

    def backend_of(self, path: str) -> str | None:
        """The backend a path belongs to, or None (shared code, or not part of any backend)."""
        for backend, entries in self.settings.backend_paths.items():
            if any(_under(path, entry) for entry in entries):
                return backend.lower()
        return (
            self._folder_backend(path)
            or self._file_backend(path, self.folder_backends)
            or ("cpu" if self._old_cpu(path) else None)
        )

    def how(self, backend: str, files: Sequence[str]) -> str:
        """How a backend was recognised, in words (kept with the scan)."""
        if backend in self.settings.backend_paths:
            return "kb.inventory.backend_paths"
        if backend in self.folder_backends:
            return f"folder {self._prefix}ggml-{backend}/" if not self.settings.backends_root else "folder"
        if backend == "cpu" and self.old_layout_cpu and any(self._old_cpu(p) for p in files):
            return "CPU files of the old layout (kb.inventory.old_layout_cpu)"
        return "files " + ", ".join(sorted({p.rsplit("/", 1)[-1] for p in files})[:3])


@dataclass
class HistoryBackends:
    """Backend rules for the paths of a whole history: a fork's commits touch files at every layout
    it has had (ik_llama.cpp kept `ggml.c` and `iqk_mul_mat.cpp` at the top before `ggml/src/`).
    Each candidate backends folder gets its own rules; the first that claims a path answers."""

    maps: list[BackendMap]

    @classmethod
    def for_paths(cls, paths: Sequence[str], settings: InventorySettings) -> HistoryBackends:
        if settings.backends_root:
            return cls([BackendMap.for_paths(paths, settings)])
        sources = [p for p in paths if _is_source(p, settings.extensions)]
        return cls([BackendMap._at(root, sources, settings) for root in GGML_ROOTS])

    def backend_of(self, path: str) -> str | None:
        for rules in self.maps:
            backend = rules.backend_of(path)
            if backend is not None:
                return backend
        return None


def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@dataclass
class Layout:
    root: str
    backends: dict[str, list[str]]
    shared: list[str]
    """Sources of no backend directly in the backends folder: read for shared definitions."""
    how: dict[str, str] = field(default_factory=dict)
    """Backend -> how it was recognised (folder, files, the old layout's CPU files, config)."""
    backend_map: BackendMap | None = None


def _is_source(path: str, extensions: Iterable[str]) -> bool:
    return any(path.endswith(ext) for ext in extensions)


def find_layout(paths: Sequence[str], settings: InventorySettings) -> Layout | None:
    """The backends of a tree and their source files (only backends that hold sources count)."""
    rules = BackendMap.for_paths(paths, settings)
    prefix = rules._prefix
    backends: dict[str, list[str]] = {}
    shared: list[str] = []
    for path in paths:
        if not _is_source(path, settings.extensions):
            continue
        backend = rules.backend_of(path)
        if backend is not None:
            backends.setdefault(backend, []).append(path)
        elif path.startswith(prefix) and "/" not in path[len(prefix) :]:
            shared.append(path)
    if not backends:
        return None
    how = {b: rules.how(b, files) for b, files in backends.items()}
    return Layout(rules.root, dict(sorted(backends.items())), shared, how, rules)


def rules_for(backend: str, settings: InventorySettings) -> list[Rule]:
    """The configured rules that apply to `backend`, or ggml's built-in rule when none are configured."""
    if not settings.rules:
        return [Rule()]
    out: list[Rule] = []
    for rule in settings.rules:
        if rule.backend_glob and not fnmatch.fnmatch(backend, rule.backend_glob):
            continue
        out.append(
            Rule(
                calls=tuple(rule.call),
                op_prefix=rule.op_prefix,
                unary_prefix=rule.unary_prefix,
                pattern=re.compile(rule.pattern) if rule.pattern else None,
            )
        )
    return out


def scan_options(settings: InventorySettings) -> ScanOptions:
    return ScanOptions(
        view_ops=frozenset(settings.view_ops),
        single_ops=tuple(settings.single_ops),
        reorder=re.compile(settings.reorder_functions),
    )
