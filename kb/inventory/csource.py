"""The C-family source reader behind the inventory: no compiler and no preprocessor.

Comments, string and char literals and `#if 0` blocks are blanked (offsets and line numbers kept);
functions and their statements are segmented by brackets; `path_to` names the statements that
enclose a position (the branch of an `if`, the body of a loop), which the evaluator walks.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

_CONTROL = frozenset(
    {
        "if",
        "for",
        "while",
        "switch",
        "catch",
        "return",
        "sizeof",
        "decltype",
        "alignof",
        "alignas",
        "defined",
        "__attribute__",
        "static_assert",
        "do",
        "else",
        "case",
    }
)
IDENT = re.compile(r"[A-Za-z_]\w*")
_BRACKETS = re.compile(r"[()\[\]{}]")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_STRIP = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_IF0 = re.compile(r"^[ \t]*#[ \t]*if[ \t]+0\b", re.M)
_PP_LINE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", re.M)
_KEYWORD = re.compile(r"(if|for|while|switch|do|else|return|break|continue|case|default|goto)\b")
INT = re.compile(r"^\d+[uUlL]*$")

# --- source text -----------------------------------------------------------------------------------


def _blank(text: str) -> str:
    if "\n" not in text:
        return " " * len(text)
    return "\n".join(" " * len(part) for part in text.split("\n"))


def _strip_if0(code: str) -> str:
    """Blank `#if 0 ... #else|#endif` (nested conditionals counted): dead code is not a fusion."""
    out = code
    for start in reversed([m.start() for m in _IF0.finditer(code)]):
        depth = 0
        for m in _PP_LINE.finditer(out, start):
            word = m.group(1)
            if word in ("if", "ifdef", "ifndef"):
                depth += 1
            elif word == "endif" or (word in ("else", "elif") and depth == 1):
                if word == "endif":
                    depth -= 1
                if depth == 0 or word in ("else", "elif"):
                    end = m.start()
                    out = out[:start] + _blank(out[start:end]) + out[end:]
                    break
    return out


def strip_code(text: str) -> str:
    """Comments, string and char literals, and `#if 0` blocks blanked; offsets and newlines kept."""
    code = _STRIP.sub(lambda m: _blank(m.group()), text)
    if "#" in code and _IF0.search(code):
        code = _strip_if0(code)
    return code


def match_forward(code: str, pos: int, limit: int | None = None) -> int:
    """Index of the bracket closing the one at `pos` (or `limit`/len when unbalanced)."""
    depth = 0
    end = len(code) if limit is None else limit
    for m in _BRACKETS.finditer(code, pos, end):
        c = m.group()
        if c in _OPENERS:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    return end


def match_backward(code: str, pos: int) -> int:
    """Index of the bracket opening the one closing at `pos`, or -1."""
    depth = 0
    i = pos
    while i >= 0:
        c = code[i]
        if c in _CLOSERS:
            depth += 1
        elif c in _OPENERS:
            depth -= 1
            if depth == 0:
                return i
        i -= 1
    return -1


def split_top(text: str, sep: str = ",", angle: bool = False) -> list[tuple[str, int]]:
    """Split on `sep` outside brackets; (piece, offset) with pieces stripped. `angle` counts <>."""
    parts: list[tuple[str, int]] = []
    depth = 0
    start = 0
    i = 0
    n = len(text)
    width = len(sep)
    while i < n:
        c = text[i]
        if c in "([{" or (angle and c == "<"):
            depth += 1
        elif c in ")]}" or (angle and c == ">" and depth > 0):
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            piece = text[start:i]
            parts.append((piece.strip(), start + len(piece) - len(piece.lstrip())))
            i += width
            start = i
            continue
        i += 1
    piece = text[start:]
    if piece.strip() or parts:
        parts.append((piece.strip(), start + len(piece) - len(piece.lstrip())))
    return parts


def strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and match_forward(text, 0) == len(text) - 1:
        text = text[1:-1].strip()
    return text


# --- functions and statements ----------------------------------------------------------------------


@dataclass
class Param:
    name: str
    type: str


class Function:
    """A function definition: its name, parameters (parsed on first use) and body braces."""

    __slots__ = ("name", "name_pos", "open", "close", "param_text", "_params")

    def __init__(self, name: str, name_pos: int, param_text: str, open_: int, close: int) -> None:
        self.name = name
        self.name_pos = name_pos
        self.open = open_
        self.close = close
        self.param_text = param_text
        self._params: list[Param] | None = None

    @property
    def params(self) -> list[Param]:
        if self._params is None:
            self._params = _params(self.param_text)
        return self._params

    def param_index(self, name: str) -> int | None:
        if name not in self.param_text:
            return None
        for i, p in enumerate(self.params):
            if p.name == name:
                return i
        return None


@dataclass
class Stmt:
    kind: str  # block, if, loop, switch, simple, jump, label
    start: int
    end: int
    head: tuple[int, int] | None = None  # if condition / loop header / switch value (inside parens)
    body: list[Stmt] = field(default_factory=list)  # block or switch children
    then: Stmt | None = None
    other: Stmt | None = None  # else branch, or loop body
    word: str = ""


def _params(text: str) -> list[Param]:
    out: list[Param] = []
    for piece, _ in split_top(text, ",", angle=True):
        piece = piece.split("=", 1)[0].strip()
        if not piece or piece in ("void", "..."):
            continue
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", piece)
        if m is None:
            continue
        out.append(Param(m.group(1), piece[: m.start()].strip()))
    return out


_QUALIFIERS = ("const", "override", "final", "noexcept", "mutable", "volatile")


def _header_close(code: str, brace: int) -> int:
    """Position of the `)` ending a function header before `{` (qualifiers skipped), or -1."""
    i = brace - 1
    while True:
        while i >= 0 and code[i] in " \t\r\n":
            i -= 1
        if i < 0:
            return -1
        if code[i] == ")":
            return i
        for word in _QUALIFIERS:
            start = i - len(word) + 1
            if (
                start >= 0
                and code.startswith(word, start)
                and (start == 0 or not (code[start - 1].isalnum() or code[start - 1] == "_"))
            ):
                i = start - 1
                break
        else:
            return -1


class SourceFile:
    """One file of a backend: raw text for snippets, stripped code for analysis, lazily segmented."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.raw = text
        self.code = strip_code(text)

    @cached_property
    def _newlines(self) -> list[int]:
        return [m.start() for m in re.finditer("\n", self.raw)]

    def line_of(self, pos: int) -> int:
        return bisect.bisect_left(self._newlines, pos) + 1

    def snippet(self, pos: int, width: int = 160) -> str:
        line = self.line_of(pos)
        start = self._newlines[line - 2] + 1 if line >= 2 else 0
        end = self._newlines[line - 1] if line - 1 < len(self._newlines) else len(self.raw)
        text = self.raw[start:end].strip()
        return text if len(text) <= width else text[: width - 3] + "..."

    @cached_property
    def functions(self) -> list[Function]:
        code = self.code
        found: list[Function] = []
        pos = 0
        while True:
            brace = code.find("{", pos)
            if brace < 0:
                return found
            pos = brace + 1
            close_paren = _header_close(code, brace)
            if close_paren < 0:
                continue
            open_paren = match_backward(code, close_paren)
            if open_paren <= 0:
                continue
            j = open_paren - 1
            while j >= 0 and code[j] in " \t\r\n":
                j -= 1
            k = j
            while k >= 0 and (code[k].isalnum() or code[k] == "_"):
                k -= 1
            name = code[k + 1 : j + 1]
            if not name or name in _CONTROL or not IDENT.fullmatch(name):
                continue
            before = code[max(0, k - 6) : k + 1].rstrip()
            if before.endswith((".", "->", "=", ",", "(", "return", "!", "&&", "||")):
                continue  # a call or an expression, not a definition
            close = match_forward(code, brace)
            found.append(Function(name, k + 1, code[open_paren + 1 : close_paren], brace, close))

    @cached_property
    def _function_opens(self) -> list[int]:
        return [f.open for f in self.functions]

    def function_at(self, pos: int) -> Function | None:
        """The innermost function whose body holds `pos`."""
        i = bisect.bisect_right(self._function_opens, pos) - 1
        best: Function | None = None
        while i >= 0:
            f = self.functions[i]
            if f.open < pos < f.close and (best is None or f.open > best.open):
                best = f
                break
            i -= 1
        return best

    @cached_property
    def function_by_name(self) -> dict[str, Function]:
        return {f.name: f for f in self.functions}

    def body(self, func: Function) -> list[Stmt]:
        cache: dict[int, list[Stmt]] = self.__dict__.setdefault("_bodies", {})
        if func.open not in cache:
            cache[func.open] = parse_block(self.code, func.open + 1, func.close)
        return cache[func.open]


def _skip_ws(code: str, p: int, end: int) -> int:
    while p < end and code[p] in " \t\r\n":
        p += 1
    return p


def parse_block(code: str, start: int, end: int) -> list[Stmt]:
    out: list[Stmt] = []
    p = start
    while True:
        p = _skip_ws(code, p, end)
        if p >= end:
            return out
        stmt = parse_stmt(code, p, end)
        if stmt.end <= p:  # never loop on malformed input
            stmt.end = p + 1
        out.append(stmt)
        p = stmt.end


def _paren_after(code: str, p: int, end: int) -> tuple[int, int] | None:
    q = _skip_ws(code, p, end)
    if q < end and code[q] == "(":
        close = match_forward(code, q, end)
        return q + 1, close
    return None


def to_semicolon(code: str, p: int, end: int) -> int:
    depth = 0
    i = p
    while i < end:
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return end


def parse_stmt(code: str, p: int, end: int) -> Stmt:
    c = code[p]
    if c == "#":
        q = p
        while True:  # a preprocessor line (with continuations) is not a statement
            nl = code.find("\n", q)
            if nl < 0 or nl >= end:
                return Stmt("label", p, end)
            if code[nl - 1] != "\\":
                return Stmt("label", p, nl + 1)
            q = nl + 1
    if c == "{":
        close = match_forward(code, p, end)
        return Stmt("block", p, close + 1, body=parse_block(code, p + 1, close))
    if c == ";":
        return Stmt("simple", p, p + 1)
    m = _KEYWORD.match(code, p)
    if m is not None:
        word = m.group(1)
        q = m.end()
        if word == "if":
            head = _paren_after(code, q, end)
            if head is None:
                return Stmt("simple", p, to_semicolon(code, p, end))
            then = parse_stmt(code, _skip_ws(code, head[1] + 1, end), end)
            stmt = Stmt("if", p, then.end, head=head, then=then)
            r = _skip_ws(code, then.end, end)
            if code.startswith("else", r) and not (
                r + 4 < len(code) and (code[r + 4].isalnum() or code[r + 4] == "_")
            ):
                other = parse_stmt(code, _skip_ws(code, r + 4, end), end)
                stmt.other = other
                stmt.end = other.end
            return stmt
        if word in ("for", "while"):
            head = _paren_after(code, q, end)
            if head is None:
                return Stmt("simple", p, to_semicolon(code, p, end))
            body = parse_stmt(code, _skip_ws(code, head[1] + 1, end), end)
            return Stmt("loop", p, body.end, head=head, other=body, word=word)
        if word == "do":
            body = parse_stmt(code, _skip_ws(code, q, end), end)
            stop = to_semicolon(code, body.end, end)
            return Stmt("loop", p, stop, other=body, word="do")
        if word == "switch":
            head = _paren_after(code, q, end)
            if head is None:
                return Stmt("simple", p, to_semicolon(code, p, end))
            body = parse_stmt(code, _skip_ws(code, head[1] + 1, end), end)
            return Stmt("switch", p, body.end, head=head, body=[body])
        if word in ("case", "default"):
            i = q
            while i < end:
                if code[i] == ":" and code[i + 1 : i + 2] != ":" and code[i - 1] != ":":
                    return Stmt("label", p, i + 1)
                i += 1
            return Stmt("label", p, end)
        if word in ("return", "break", "continue", "goto"):
            return Stmt("jump", p, to_semicolon(code, p, end), word=word)
        # `else` without if: treat as a simple statement
    return Stmt("simple", p, to_semicolon(code, p, end))


def path_to(stmts: Sequence[Stmt], pos: int) -> list[tuple[Stmt, str]]:
    """Statements enclosing `pos`, outermost first, with the part holding it (head/then/else/body)."""
    out: list[tuple[Stmt, str]] = []
    current: Sequence[Stmt] = stmts
    while True:
        for s in current:
            if s.start <= pos < s.end:
                break
        else:
            return out
        if s.head and s.head[0] <= pos <= s.head[1]:
            out.append((s, "head"))
            return out
        if s.kind == "block" or s.kind == "switch":
            out.append((s, "body"))
            current = s.body
        elif s.kind == "if":
            if s.then and s.then.start <= pos < s.then.end:
                out.append((s, "then"))
                current = [s.then]
            elif s.other and s.other.start <= pos < s.other.end:
                out.append((s, "else"))
                current = [s.other]
            else:
                out.append((s, "head"))
                return out
        elif s.kind == "loop" and s.other is not None and s.other.start <= pos < s.other.end:
            out.append((s, "body"))
            current = [s.other]
        else:
            out.append((s, "self"))
            return out
