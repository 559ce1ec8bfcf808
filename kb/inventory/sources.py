"""One backend's sources as the scan looks things up in them: function definitions and named
lists, in the same function, the same file, another file of the backend or a shared header."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from kb.inventory.csource import Function, SourceFile


@dataclass(frozen=True)
class Definition:
    file: SourceFile
    name_pos: int
    init: int | None  # position of the `{` of the initializer
    ctor: str | None  # text inside `name(...)` for `std::vector<T> name(n, value)`
    func: Function | None


class Sources:
    """A backend's files and the shared files (definitions only), with what was looked up cached."""

    def __init__(self, files: Sequence[SourceFile], shared: Sequence[SourceFile]) -> None:
        self.files = list(files)
        self.shared = list(shared)
        self._defs: dict[tuple[str, str], list[Definition]] = {}
        self._functions: dict[str, tuple[SourceFile, Function] | None] = {}

    def function(self, name: str) -> tuple[SourceFile, Function] | None:
        """The definition of `name` in this backend or a shared file (segmenting only files that
        mention it)."""
        if name not in self._functions:
            found: tuple[SourceFile, Function] | None = None
            for f in [*self.files, *self.shared]:
                if name in f.code:
                    fn = f.function_by_name.get(name)
                    if fn is not None:
                        found = (f, fn)
                        break
            self._functions[name] = found
        return self._functions[name]

    def definition(self, f: SourceFile, fn: Function | None, pos: int, name: str) -> Definition | None:
        """Where `name` is defined as seen from `pos`: a local before it, else a global of this
        file, another file of the backend or a shared one."""
        if fn is not None:
            local = [
                d
                for d in self.defs_in(f, name)
                if d.func is not None and d.func.open == fn.open and d.name_pos < pos
            ]
            if local:
                return local[-1]
        for source in (f, *[x for x in self.files if x is not f], *self.shared):
            glob = [d for d in self.defs_in(source, name) if d.func is None]
            if glob:
                return glob[0]
        return None

    def defs_in(self, f: SourceFile, name: str) -> list[Definition]:
        key = (f.path, name)
        if key in self._defs:
            return self._defs[key]
        found: list[Definition] = []
        code = f.code
        init, decl = _definition_patterns(name)
        pos = code.find(name)
        while pos >= 0:
            nxt = pos + len(name)
            if (pos == 0 or not (code[pos - 1].isalnum() or code[pos - 1] in "_.>:")) and not (
                nxt < len(code) and (code[nxt].isalnum() or code[nxt] == "_")
            ):
                m = init.match(code, pos)
                if m and is_declaration(code, pos):
                    found.append(Definition(f, pos, m.end() - 1, None, f.function_at(pos)))
                else:
                    m = decl.match(code, pos)
                    if m and is_declaration(code, pos):
                        found.append(Definition(f, pos, None, m.group("ctor"), f.function_at(pos)))
            pos = code.find(name, nxt)
        self._defs[key] = found
        return found


def is_declaration(code: str, name_pos: int) -> bool:
    """A type (not an operator or `return`) precedes the name."""
    before = code[max(0, name_pos - 80) : name_pos].rstrip()
    if not before or before[-1] not in "_>*&" and not before[-1].isalnum():
        return False
    word = re.search(r"(\w+)$", before)
    return not (word and word.group(1) in ("return", "case", "else", "sizeof", "new", "delete"))


@lru_cache(maxsize=4096)
def _definition_patterns(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Regexes matched at an occurrence of `name`: an initialized list, or a declaration/ctor."""
    n = re.escape(name)
    init = re.compile(
        rf"{n}\s*(?:\[[^\]]*\]\s*)*(?:=\s*)?"
        rf"(?:\(\s*(?:const\s+)?(?:enum\s+)?[\w:]+\s*(?:\[\s*\w*\s*\]|\*)\s*\)\s*)?"
        rf"(?:(?:std::)?(?:initializer_list|vector|array)\s*<[^;{{]*>\s*)?\{{"
    )
    decl = re.compile(rf"{n}\s*(?:(?:\[[^\]]*\]\s*)+;|;|\((?P<ctor>[^;]*)\)\s*;)")
    return init, decl
