"""Programs the steps cannot see: a command's tool that this shell finds under a folder the
sandbox hides from every step (HOME, the workspace), so the steps run another one or none.

A pyenv or ~/.local interpreter is the common case: `python3 -m pytest` passes in the user's shell
and fails in the steps with "/usr/bin/python3: No module named pytest", or the benchmark measures
another interpreter than the one the user tried. `hidden_tools` names each such program, where this
shell finds it, what the steps find instead, and the folder `sandbox.expose` would need.

    hidden_tools(["python3 -m pytest -q"], hidden=[Path.home()], exposed=[])
    # [HiddenTool(name="python3", found="/root/.pyenv/shims/python3", under="/root",
    #             instead="/usr/bin/python3", expose="/root/.pyenv")]
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

#: Words that run the next word as the program (`env X=1 prog`, `time prog`).
_WRAPPERS = frozenset({"env", "time", "exec", "command", "nice", "nohup", "builtin"})
#: Where one shell command ends and the next begins (pipes, lists, subshells, substitutions).
_SEPARATORS = re.compile(r"\$\(|[;&|()`\n]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


@dataclass(frozen=True)
class HiddenTool:
    name: str
    """The program as the command names it (`python3`)."""
    found: str
    """Where this shell finds it."""
    under: str
    """The hidden folder it is in (HOME, the workspace)."""
    instead: str | None
    """What the steps find on the same PATH without the hidden folders (None: nothing)."""
    expose: str
    """The folder to add to sandbox.expose: the hidden folder's entry that holds it."""


def programs(command: str) -> list[str]:
    """The words of a shell command that name a program: the first word of each simple command
    (after variable assignments and wrappers such as `env` or `time`)."""
    found: list[str] = []
    for part in _SEPARATORS.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        for word in words:
            if _ASSIGNMENT.match(word) or word in _WRAPPERS or word.startswith("-"):
                continue
            found.append(word)
            break
    return list(dict.fromkeys(found))


def _under(path: Path, folders: list[Path]) -> Path | None:
    for folder in folders:
        if path == folder or path.is_relative_to(folder):
            return folder
    return None


def hidden_tools(
    commands: list[str],
    hidden: list[Path],
    exposed: list[Path],
    path_var: str | None = None,
) -> list[HiddenTool]:
    """The programs of `commands` this PATH finds under a `hidden` folder not `exposed`."""
    search = os.environ.get("PATH", "") if path_var is None else path_var
    hidden = [h.resolve() for h in hidden if str(h) not in ("", "/")]
    exposed = [e.expanduser().resolve() for e in exposed]

    def concealed(path: Path) -> Path | None:
        for candidate in dict.fromkeys((path, path.resolve())):
            if _under(candidate, exposed) is None and (folder := _under(candidate, hidden)) is not None:
                return folder
        return None

    visible = os.pathsep.join(
        entry for entry in search.split(os.pathsep) if entry and concealed(Path(entry).absolute()) is None
    )
    out: list[HiddenTool] = []
    seen: set[str] = set()
    for command in commands:
        for name in programs(command):
            if name in seen or "$" in name or ("/" in name and not name.startswith("/")):
                continue  # a variable, or a path in the tree (./bench/run)
            seen.add(name)
            where = name if name.startswith("/") else shutil.which(name, path=search)
            if where is None:
                continue
            folder = concealed(Path(where).absolute())
            if folder is None:
                continue
            inside = Path(where).absolute()
            if not inside.is_relative_to(folder):
                inside = Path(where).resolve()
            top = folder / inside.relative_to(folder).parts[0] if inside != folder else folder
            instead = None if name.startswith("/") else shutil.which(name, path=visible)
            out.append(HiddenTool(name, where, str(folder), instead, str(top)))
    return out
