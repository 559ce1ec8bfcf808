"""What the patch writer needs to port a fork commit that conflicts with the baseline.

A commit waiting as `needs_port` did not apply, even with a three-way merge. The model is shown the
fork's diff (patch_writer does), and here: each function the commit changes, as the fork has it
after the commit and as the baseline has it (found in the same file, else wherever the baseline
defines it: ik_llama.cpp's `ggml/src/ggml.c` kernels live in `ggml/src/ggml-cpu/` upstream). Files
are read in one `git cat-file --batch` per side (kb.gitrepo.read_files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kb.commit_facts import context_name
from kb.inventory.csource import Function, SourceFile

if TYPE_CHECKING:
    import git

    from kb.store.tables import PatchRow

MAX_FUNCTIONS = 8
MAX_FUNCTION_CHARS = 6_000
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_FILE = re.compile(r"^\+\+\+ (?:b/)?(.+?)\s*$")
_SOURCE = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".m", ".mm", ".metal", ".inc")


@dataclass
class PortContext:
    functions: list[tuple[str, str]] = field(default_factory=list)
    """(label, text): `fork: path function` and `baseline: path function` blocks, in pairs."""
    baseline_paths: list[str] = field(default_factory=list)
    """Baseline files that hold those functions (the patch writer shows them to be patched)."""
    missing: list[str] = field(default_factory=list)
    """Functions the fork changes that the baseline does not define anywhere we looked."""


def changed_functions(diff: str, fork_files: dict[str, str]) -> list[tuple[str, str]]:
    """(path, function name) the diff changes, in order: the functions of the fork's file (after the
    commit) that enclose its added lines, and those its hunk headers name."""
    found: dict[tuple[str, str], None] = {}
    path: str | None = None
    parsed: dict[str, tuple[SourceFile, list[int]]] = {}
    new_line = 0
    for line in diff.splitlines():
        file_match = _FILE.match(line)
        if file_match:
            path = None if file_match.group(1) == "/dev/null" else file_match.group(1)
            continue
        hunk = _HUNK.match(line)
        if hunk:
            new_line = int(hunk.group(3))
            name = context_name(hunk.group(5))
            if path is not None and name:
                found.setdefault((path, name), None)
            continue
        if path is None or line[:1] not in ("+", " ", "-"):
            continue
        if line.startswith("+") and path.endswith(_SOURCE) and path in fork_files:
            if path not in parsed:
                text = fork_files[path]
                starts = [0, *(m.end() for m in re.finditer("\n", text))]
                parsed[path] = (SourceFile(path, text), starts)
            source, starts = parsed[path]
            func = source.function_at(starts[min(new_line, len(starts)) - 1] if new_line >= 1 else 0)
            if func is not None:
                found.setdefault((path, func.name), None)
        if not line.startswith("-"):
            new_line += 1
    return list(found)


def function_text(source: SourceFile, func: Function) -> str:
    """A function's definition as written: from its signature's first line to its closing brace (a
    return type on the line above the name is kept)."""
    raw = source.raw
    start = raw.rfind("\n", 0, func.name_pos) + 1
    if not raw[start : func.name_pos].strip():  # `static void\nname(` puts the type a line above
        start = raw.rfind("\n", 0, max(0, start - 1)) + 1
    text = raw[start : func.close + 1]
    if len(text) > MAX_FUNCTION_CHARS:
        text = text[:MAX_FUNCTION_CHARS] + f"\n[... {len(text) - MAX_FUNCTION_CHARS} more characters]"
    return text


def port_context(repo: git.Repo, baseline: str, patch: PatchRow, files: list[str]) -> PortContext:
    """The fork's and the baseline's versions of the functions a fork commit's patch changes."""
    from kb import gitrepo

    ctx = PortContext()
    sha = patch["author"] if patch["author_kind"] == "fork_commit" else None
    if not sha or not gitrepo.has_commit(repo, sha):
        return ctx
    sources = [p for p in files if p.endswith(_SOURCE)]
    fork_files = gitrepo.read_files(repo, sha, sources)
    base_files = gitrepo.read_files(repo, baseline, sources)
    wanted = changed_functions(patch["diff"], fork_files)[:MAX_FUNCTIONS]
    fork_parsed = {p: SourceFile(p, t) for p, t in fork_files.items()}
    base_parsed = {p: SourceFile(p, t) for p, t in base_files.items()}
    for path, name in wanted:
        fork_func = fork_parsed[path].function_by_name.get(name) if path in fork_parsed else None
        if fork_func is None:
            continue  # a hunk header naming a struct or a table: the diff shows it
        ctx.functions.append((f"fork: {path} {name}", function_text(fork_parsed[path], fork_func)))
        where = _baseline_definition(repo, baseline, name, path, base_parsed)
        if where is None:
            ctx.missing.append(name)
            continue
        base_path, base_func = where
        ctx.functions.append(
            (f"baseline: {base_path} {name}", function_text(base_parsed[base_path], base_func))
        )
        if base_path not in ctx.baseline_paths:
            ctx.baseline_paths.append(base_path)
    return ctx


def _baseline_definition(
    repo: git.Repo, baseline: str, name: str, path: str, parsed: dict[str, SourceFile]
) -> tuple[str, Function] | None:
    """Where the baseline defines `name`: the fork's path first, else the files `git grep` finds."""
    from kb import gitrepo

    if path in parsed and name in parsed[path].function_by_name:
        return path, parsed[path].function_by_name[name]
    bare = name.rsplit("::", 1)[-1]
    found = gitrepo.grep_count(repo, baseline, [bare])
    candidates = [p for p in sorted(found, key=lambda p: -sum(found[p].values())) if p.endswith(_SOURCE)][:6]
    for candidate, text in gitrepo.read_files(
        repo, baseline, [c for c in candidates if c not in parsed]
    ).items():
        parsed[candidate] = SourceFile(candidate, text)
    for candidate in candidates:
        if candidate in parsed and name in parsed[candidate].function_by_name:
            return candidate, parsed[candidate].function_by_name[name]
    return None
