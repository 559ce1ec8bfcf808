"""Reading C-family backend sources for operator fusions: the analysis behind `kb inventory`.

No compiler and no preprocessor: comments, strings and `#if 0` blocks are blanked (offsets and line
numbers kept), functions and their statements are segmented by brackets, and each call to a fusion
predicate (`ggml_can_fuse(cgraph, i, {GGML_OP_RMS_NORM, GGML_OP_MUL})` and its relatives, or the
calls a project names in its config) has its op list resolved from what the code writes down:

- literal lists, split across lines, compound literals `(enum op[]){...}`;
- named lists (`const enum ggml_op fuse_ops[] = {...}`, `std::initializer_list<ggml_op> x{...}`) in
  the same function, the same file, another file of the backend or a shared header;
- helper functions that forward one of their parameters to a predicate (wrappers of wrappers too),
  and functions that compare a parameter list against `node->op` element by element (matchers);
- table-driven registries: `for (auto & f : table) ... can_fuse(..., f.ops)` reads every row;
- lists built at run time (`ops[0] = op; ops.insert(ops.end(), {...}); std::fill(...)`), simulated
  along every branch, with loop variables over literal lists (`for (ggml_op op : {A, B})`), ternaries
  on them and `if (node->op == A || node->op == B)` guards giving the possible values;
- unary kinds from a second argument (`{GGML_UNARY_OP_SILU}`) or from the one helper that checks it;
- hand-written "the next node is op X" checks under a `case GGML_OP_...:` label.

Look-alikes are dropped: calls in comments or dead `#if 0` code, calls inside graph-reordering
functions (`*graph_optimize*`, `*reorder*`), and calls that start at an offset (`i + k`) to extend an
earlier match. What cannot be resolved is reported as unclassified with the reason, never guessed.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

MAX_VARIANTS = 64
"""Most op lists one call site may stand for (loop values x branches) before it is unclassified."""

DEFAULT_VIEW_OPS = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")
"""Ops that move no data: dropped from fusion keys, so backends that place views differently compare."""

GGML_CALLS = ("ggml_can_fuse", "ggml_can_fuse_ext", "ggml_can_fuse_subgraph", "ggml_can_fuse_subgraph_ext")
REORDER_FUNCTIONS = r"graph_optimi[sz]e|reorder"

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
_IDENT = re.compile(r"[A-Za-z_]\w*")
_BRACKETS = re.compile(r"[()\[\]{}]")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_STRIP = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_IF0 = re.compile(r"^[ \t]*#[ \t]*if[ \t]+0\b", re.M)
_PP_LINE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", re.M)
_KEYWORD = re.compile(r"(if|for|while|switch|do|else|return|break|continue|case|default|goto)\b")
_INT = re.compile(r"^\d+[uUlL]*$")
_INDEXED_OP_COMPARE = re.compile(
    r"->\s*op\s*[!=]=\s*\w+\s*(?:\.\s*begin\s*\(\s*\)\s*)?\[|\]\s*[!=]=\s*[\w\[\]\->.+ ]*->\s*op\b"
)
_NEXT_NODE_OP = re.compile(r"\[\s*\w+\s*\+\s*[12]\s*\]\s*(?:->\s*op\b|;)")


class Unresolved(Exception):
    """An op list the scanner cannot resolve; the message says why (it becomes `unclassified`)."""


# --- data the scan produces ------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One fusion found in one backend: the normalised ops, the raw list, and where it is decided."""

    backend: str
    ops: tuple[str, ...]
    raw_ops: tuple[str, ...]
    file: str
    line: int
    how: str
    snippet: str


@dataclass(frozen=True)
class Unclassified:
    backend: str
    file: str
    line: int
    snippet: str
    why: str


@dataclass(frozen=True)
class SingleOp:
    backend: str
    op: str
    file: str
    line: int


@dataclass
class Rule:
    """How one project decides fusions (built from `[[kb.inventory.rules]]`, or the ggml default)."""

    calls: tuple[str, ...] = GGML_CALLS
    op_prefix: str = "GGML_OP_"
    unary_prefix: str = "GGML_UNARY_OP_"
    pattern: re.Pattern[str] | None = None


@dataclass
class ScanOptions:
    view_ops: frozenset[str] = frozenset(DEFAULT_VIEW_OPS)
    single_ops: tuple[str, ...] = ("SOFT_MAX", "FLASH_ATTN_EXT", "GLU")
    unary_op: str = "UNARY"
    reorder: re.Pattern[str] = field(default_factory=lambda: re.compile(REORDER_FUNCTIONS))


@dataclass
class BackendResult:
    sites: list[Site] = field(default_factory=list)
    unclassified: list[Unclassified] = field(default_factory=list)
    excluded: list[Unclassified] = field(default_factory=list)
    singles: list[SingleOp] = field(default_factory=list)


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
            if not name or name in _CONTROL or not _IDENT.fullmatch(name):
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


def _to_semicolon(code: str, p: int, end: int) -> int:
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
                return Stmt("simple", p, _to_semicolon(code, p, end))
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
                return Stmt("simple", p, _to_semicolon(code, p, end))
            body = parse_stmt(code, _skip_ws(code, head[1] + 1, end), end)
            return Stmt("loop", p, body.end, head=head, other=body, word=word)
        if word == "do":
            body = parse_stmt(code, _skip_ws(code, q, end), end)
            stop = _to_semicolon(code, body.end, end)
            return Stmt("loop", p, stop, other=body, word="do")
        if word == "switch":
            head = _paren_after(code, q, end)
            if head is None:
                return Stmt("simple", p, _to_semicolon(code, p, end))
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
            return Stmt("jump", p, _to_semicolon(code, p, end), word=word)
        # `else` without if: treat as a simple statement
    return Stmt("simple", p, _to_semicolon(code, p, end))


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


# --- resolution of op lists ------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    ops: tuple[str, ...]
    file: SourceFile | None = None
    pos: int | None = None
    how: str = ""
    unary: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Definition:
    file: SourceFile
    name_pos: int
    init: int | None  # position of the `{` of the initializer
    ctor: str | None  # text inside `name(...)` for `std::vector<T> name(n, value)`
    func: Function | None


@dataclass
class Predicate:
    """A function whose call decides a fusion: where its op list, unary kinds and start index are."""

    name: str
    ops_arg: int | None  # None: the first list-like argument after the graph
    index_arg: int | None = 1
    count_arg: int | None = None
    how: str = "call"


def _core_predicate(name: str, nargs: int) -> tuple[int, int | None, int | None]:
    """(ops, count, index) argument positions of ggml's own predicates for a call with `nargs`."""
    if name == "ggml_can_fuse_subgraph":
        return (3, 2, 1) if nargs >= 5 else (2, None, 1)
    if name == "ggml_can_fuse_subgraph_ext":
        return 3, 2, None
    if name == "ggml_can_fuse_ext":
        return 2, 3, None
    return 2, 3, 1


@dataclass
class State:
    elems: tuple[str | None, ...] = ()
    fill: str | None = None
    dead: bool = False
    stopped: bool = False


class BackendScanner:
    """All the analysis of one backend folder (its files, plus shared files for definitions)."""

    def __init__(
        self,
        backend: str,
        files: Sequence[SourceFile],
        shared: Sequence[SourceFile],
        rule: Rule,
        options: ScanOptions,
    ) -> None:
        self.backend = backend
        self.files = list(files)
        self.shared = list(shared)
        self.rule = rule
        self.options = options
        self.result = BackendResult()
        self.predicates: dict[str, Predicate] = {}
        self._defs: dict[tuple[str, str], list[Definition]] = {}
        self._op_re = re.compile(rf"^{re.escape(rule.op_prefix)}(\w+)$")
        self._unary_re = re.compile(rf"^{re.escape(rule.unary_prefix)}(\w+)$") if rule.unary_prefix else None
        self._functions: dict[str, tuple[SourceFile, Function] | None] = {}
        self._table_functions: set[str] = set()
        self._site_functions: set[tuple[str, int]] = set()

    # -- entry point --

    def scan(self) -> BackendResult:
        relevant = [f for f in self.files if self.rule.op_prefix in f.raw or self._mentions_calls(f)]
        self._discover_predicates(relevant)
        for f in relevant:
            self._scan_calls(f)
            self._scan_case_next(f)
            if self.rule.pattern is not None:
                self._scan_pattern(f)
        for f in relevant:
            self._scan_matchers(f)
        self._scan_singles(relevant)
        return self.result

    def _function(self, name: str) -> tuple[SourceFile, Function] | None:
        """The definition of `name` in this backend (segmenting only files that mention it)."""
        if name not in self._functions:
            found: tuple[SourceFile, Function] | None = None
            for f in self.files:
                if name in f.code:
                    fn = f.function_by_name.get(name)
                    if fn is not None:
                        found = (f, fn)
                        break
            self._functions[name] = found
        return self._functions[name]

    def _mentions_calls(self, f: SourceFile) -> bool:
        return any(name in f.raw for name in self.rule.calls)

    # -- predicates: the configured calls, their wrappers and op-list matchers --

    def _discover_predicates(self, files: Sequence[SourceFile]) -> None:
        for name in self.rule.calls:
            self.predicates[name] = Predicate(name, None)
        for f in files:
            if _INDEXED_OP_COMPARE.search(f.code):
                for fn in f.functions:
                    self._maybe_matcher(f, fn)
        changed = True
        while changed:
            changed = False
            call_re = self._call_re()
            for f in files:
                if not any(n in f.code for n in self.predicates):
                    continue
                for m in call_re.finditer(f.code):
                    owner = f.function_at(m.start())
                    if owner is None or owner.name in self.predicates or not owner.params:
                        continue
                    args = self._args(f, m.end() - 1)
                    pred = self.predicates[m.group(1)]
                    ops_i, _, index_i = self._positions(pred, args)
                    if ops_i is None or ops_i >= len(args):
                        continue
                    ident = self._plain_name(args[ops_i][0])
                    param = owner.param_index(ident) if ident else None
                    if param is None:
                        continue
                    index_param = None
                    if index_i is not None and index_i < len(args):
                        index_param = owner.param_index(args[index_i][0].strip())
                    self.predicates[owner.name] = Predicate(
                        owner.name, param, index_param, None, how=f"helper {owner.name}"
                    )
                    changed = True

    def _maybe_matcher(self, f: SourceFile, fn: Function) -> None:
        """A function comparing `node->op` with the elements of one of its list parameters."""
        if fn.name in self.predicates or not fn.param_text.strip():
            return
        body = f.code[fn.open : fn.close]
        if "->op" not in body or not _INDEXED_OP_COMPARE.search(body):
            return
        for i, p in enumerate(fn.params):
            if re.search(r"\bint\b|\bbool\b|tensor|cgraph|graph\b", p.type) and "op" not in p.type:
                continue
            name = re.escape(p.name)
            elem = rf"\b{name}\s*(?:\.\s*begin\s*\(\s*\)\s*)?\["
            if re.search(rf"->\s*op\s*(?:!=|==)\s*{elem}", body) or re.search(
                rf"{elem}[^\]]*\]\s*(?:!=|==)\s*[\w\[\]\->.+ ]*->\s*op\b", body
            ):
                index = i - 1 if i > 0 and re.search(r"\bint\b|size_t", fn.params[i - 1].type) else None
                self.predicates[fn.name] = Predicate(fn.name, i, index, None, how=f"matcher {fn.name}")
                return

    def _call_re(self) -> re.Pattern[str]:
        names = sorted(self.predicates, key=len, reverse=True)
        return re.compile(r"(?<![\w.>:])(" + "|".join(re.escape(n) for n in names) + r")\s*\(")

    def _args(self, f: SourceFile, open_paren: int) -> list[tuple[str, int]]:
        close = match_forward(f.code, open_paren)
        return [(t, open_paren + 1 + off) for t, off in split_top(f.code[open_paren + 1 : close])]

    def _positions(
        self, pred: Predicate, args: list[tuple[str, int]]
    ) -> tuple[int | None, int | None, int | None]:
        """(ops, count, index) argument positions for a call of `pred` with these arguments."""
        if pred.name in GGML_CALLS and pred.ops_arg is None:
            return _core_predicate(pred.name, len(args))
        if pred.ops_arg is not None:
            return pred.ops_arg, pred.count_arg, pred.index_arg
        # A configured call: the first brace list (or compound literal), else the third argument.
        chosen = next(
            (i for i, (t, _) in enumerate(args) if i >= 1 and self._unwrap(t).startswith("{")), None
        )
        if chosen is None and len(args) > 2:
            chosen = 2
        if chosen is None:
            return None, None, None
        count = chosen + 1 if chosen + 1 < len(args) and _INT.match(args[chosen + 1][0]) else None
        return chosen, count, chosen - 1 if chosen >= 1 else None

    @staticmethod
    def _plain_name(text: str) -> str | None:
        t = BackendScanner._unwrap(text)
        return t if _IDENT.fullmatch(t) else None

    @staticmethod
    def _unwrap(text: str) -> str:
        t = text.strip()
        t = re.sub(r"\.\s*(?:data|begin)\s*\(\s*\)\s*$", "", t)
        t = re.sub(r"^&\s*(\w+)\s*\[\s*0\s*\]$", r"\1", t)
        t = re.sub(r"^\(\s*(?:const\s+)?(?:enum\s+)?[\w:]+\s*(?:const\s*)?\*\s*\)\s*", "", t)
        t = re.sub(r"^(?:const\s+)?(?:std::)?(?:initializer_list|vector|array)\s*<[^{]*>\s*(?=\{)", "", t)
        t = re.sub(r"^\(\s*(?:const\s+)?(?:enum\s+)?[\w:]+\s*\[\s*\w*\s*\]\s*\)\s*(?=\{)", "", t)
        return t.strip()

    # -- call sites --

    def _scan_calls(self, f: SourceFile) -> None:
        if not any(n in f.code for n in self.predicates):
            return
        for m in self._call_re().finditer(f.code):
            fn = f.function_at(m.start())
            if fn is None or m.start() == fn.name_pos:
                continue  # a declaration or the definition itself
            if self.options.reorder.search(fn.name):
                self._exclude(f, m.start(), f"in {fn.name}(), which only reorders the graph")
                continue
            pred = self.predicates[m.group(1)]
            if pred.name == fn.name:
                continue  # recursion inside a helper
            args = self._args(f, m.end() - 1)
            try:
                self._site(f, fn, m.start(), pred, args)
            except Unresolved as exc:
                self._unclassified(f, m.start(), str(exc))
                self._site_functions.add((f.path, fn.open))

    def _site(
        self, f: SourceFile, fn: Function, pos: int, pred: Predicate, args: list[tuple[str, int]]
    ) -> None:
        ops_i, count_i, index_i = self._positions(pred, args)
        if ops_i is None or ops_i >= len(args):
            raise Unresolved(f"no op list among the arguments of {pred.name}()")
        ops_text, ops_pos = args[ops_i]
        if (
            self._plain_name(ops_text) is not None
            and fn.param_index(self._plain_name(ops_text) or "") is not None
        ):
            return  # forwards its parameter: a helper, the callers are the sites
        if index_i is not None and index_i < len(args):
            self._check_start(f, fn, args[index_i][0], pos)
        unary = self._unary_arg(f, fn, args, ops_i, count_i, index_i)
        count_text = args[count_i][0] if count_i is not None and count_i < len(args) else None
        how = pred.how if pred.how != "call" else pred.name
        found: dict[tuple[str, ...], Variant] = {}
        for env in self._envs(f, fn, pos):
            for v in self._eval_list(f, fn, ops_pos, ops_text, env, count_text):
                key = v.ops
                if key not in found:
                    found[key] = v
                if len(found) > MAX_VARIANTS:
                    raise Unresolved(f"more than {MAX_VARIANTS} op lists possible here")
        if not found:
            raise Unresolved("no reachable op list (every path returns before the call)")
        self._site_functions.add((f.path, fn.open))
        for v in found.values():
            kinds = v.unary if v.unary is not None else unary
            if kinds is None and self.options.unary_op in v.ops:
                kinds = self._infer_unary(f, fn, pos)
            self._emit(
                v.file or f,
                v.pos if v.pos is not None else pos,
                v.ops,
                kinds,
                v.how or how,
                snippet_pos=pos if v.pos is None else v.pos,
            )

    def _check_start(self, f: SourceFile, fn: Function, index_text: str, pos: int) -> None:
        """A call starting at `i + k` checks the tail of an earlier match, not a fusion of its own."""
        t = strip_parens(index_text)
        if "+" not in t:
            return
        m = re.fullmatch(r"(\w+)\s*\+\s*(\w+)", t)
        if m and _IDENT.fullmatch(m.group(2)):
            var = m.group(2)
            before = f.code[fn.open : pos]
            if re.search(rf"\b{re.escape(var)}\s*=\s*0\s*[;,)]", before):
                return  # a loop counter from 0: the first iteration starts at the node itself
        raise Unresolved(f"starts at {t}: extends an earlier match rather than deciding a fusion")

    def _unary_arg(
        self,
        f: SourceFile,
        fn: Function,
        args: list[tuple[str, int]],
        ops_i: int,
        count_i: int | None,
        index_i: int | None,
    ) -> tuple[str, ...] | None:
        """Unary kinds given as an argument (`{GGML_UNARY_OP_SILU}`); () when given but unknown."""
        if self._unary_re is None:
            return None
        for i, (text, _) in enumerate(args):
            if i in (ops_i, count_i, index_i) or i == 0:
                continue
            t = self._unwrap(text)
            if not t.startswith("{"):
                continue
            elems = [e for e, _ in split_top(t[1:-1]) if e]
            if not elems:
                continue
            kinds = [self._unary_re.match(e) for e in elems]
            if all(kinds):
                return tuple(k.group(1) for k in kinds if k)
            if any("unary" in e.lower() for e in elems):
                return ()  # kinds computed at run time: the fusion holds for several, name none
        return None

    def _infer_unary(self, f: SourceFile, fn: Function, pos: int) -> tuple[str, ...] | None:
        """The unary kind when the one helper deciding this fusion checks exactly one."""
        if self._unary_re is None:
            return None
        prefix = re.escape(self.rule.unary_prefix)
        for stmt, part in reversed(path_to(f.body(fn), pos)):
            if part == "head" and stmt.head:
                head = f.code[stmt.head[0] : stmt.head[1]]
                kinds: set[str] = set()
                for call in re.finditer(r"([A-Za-z_]\w*)\s*\(", head):
                    name = call.group(1)
                    helper = self._function(name) if name not in self.predicates else None
                    if helper is None:
                        continue
                    hf, hfn = helper
                    kinds |= set(re.findall(rf"{prefix}(\w+)", hf.code[hfn.open : hfn.close]))
                if len(kinds) == 1:
                    return (kinds.pop(),)
                break
        # A small helper around this fusion (few predicate calls) that checks one kind decides it;
        # a dispatch function full of fusions mentioning one kind elsewhere does not.
        body = f.code[fn.open : fn.close]
        if len(self._call_re().findall(body)) > 3:
            return None
        kinds = set(re.findall(rf"unary_op\s*\([^()]*\)\s*[!=]=\s*{prefix}(\w+)", body))
        return (kinds.pop(),) if len(kinds) == 1 else None

    # -- evaluation --

    def _envs(self, f: SourceFile, fn: Function, pos: int) -> Iterator[dict[str, object]]:
        """Bindings of enclosing `for (x : {A, B})` loops, keeping only those that reach `pos`."""
        path = path_to(f.body(fn), pos)
        loops: list[tuple[str, list[object]]] = []
        for stmt, part in path:
            if stmt.kind == "loop" and stmt.word == "for" and part == "body" and stmt.head:
                header = f.code[stmt.head[0] : stmt.head[1]]
                pieces = [p for p in re.split(r"(?<!:):(?!:)", header)]
                if len(pieces) != 2 or ";" in header:
                    continue
                var = re.search(r"(\w+)\s*$", pieces[0])
                iterable = pieces[1].strip()
                if var is None or not iterable.startswith("{"):
                    continue
                values: list[object] = []
                for elem, _ in split_top(iterable[1:-1]):
                    if not elem:
                        continue
                    value = self._constant(elem)
                    if value is None:
                        break
                    values.append(value)
                else:
                    loops.append((var.group(1), values))
        names = [name for name, _ in loops]
        count = 0
        for combo in itertools.product(*(vals for _, vals in loops)):
            env: dict[str, object] = dict(zip(names, combo, strict=True))
            if self._reachable(f, path, env):
                count += 1
                if count > MAX_VARIANTS:
                    raise Unresolved(f"more than {MAX_VARIANTS} loop bindings reach this call")
                yield env

    def _reachable(self, f: SourceFile, path: list[tuple[Stmt, str]], env: dict[str, object]) -> bool:
        for stmt, part in path:
            if stmt.kind == "if" and stmt.head and part in ("then", "else"):
                value = self._cond(f.code[stmt.head[0] : stmt.head[1]], env)
                if value is not None and value != (part == "then"):
                    return False
        return True

    def _constant(self, text: str) -> object | None:
        t = strip_parens(text)
        m = self._op_re.match(t)
        if m:
            return m.group(1)
        if t in ("true", "false"):
            return t == "true"
        if _INT.match(t):
            return int(re.sub(r"[uUlL]+$", "", t))
        return None

    def _cond(self, text: str, env: dict[str, object]) -> bool | None:
        """Evaluate a condition when it only depends on bound loop variables and constants."""
        t = strip_parens(text)
        for sep, combine in (("||", any), ("&&", all)):
            parts = split_top(t, sep)
            if len(parts) > 1:
                values = [self._cond(p, env) for p, _ in parts]
                if combine is any and any(v is True for v in values):
                    return True
                if combine is all and any(v is False for v in values):
                    return False
                return None if any(v is None for v in values) else combine(bool(v) for v in values)
        if t.startswith("!") and not t.startswith("!="):
            inner = self._cond(t[1:], env)
            return None if inner is None else not inner
        m = re.fullmatch(r"(.+?)\s*(==|!=)\s*(.+)", t)
        if m:
            left = self._scalar(m.group(1), env)
            right = self._scalar(m.group(3), env)
            if left is None or right is None:
                return None
            return (left == right) == (m.group(2) == "==")
        value = self._scalar(t, env)
        return value if isinstance(value, bool) else None

    def _scalar(self, text: str, env: dict[str, object]) -> object | None:
        t = strip_parens(text)
        if t in env:
            return env[t]
        return self._constant(t)

    def _values(
        self, f: SourceFile, fn: Function, pos: int, text: str, env: dict[str, object], depth: int = 0
    ) -> list[object]:
        """The possible values of an op-valued expression at `pos`."""
        t = strip_parens(text)
        if depth > 8:
            raise Unresolved(f"cannot follow {t}")
        constant = self._constant(t)
        if constant is not None:
            return [constant]
        if t in env:
            return [env[t]]
        q = self._find_top(t, "?")
        if q is not None:
            colon = self._find_top(t, ":", q + 1)
            if colon is not None:
                cond = self._cond(t[:q], env)
                yes = self._values(f, fn, pos, t[q + 1 : colon], env, depth + 1)
                no = self._values(f, fn, pos, t[colon + 1 :], env, depth + 1)
                if cond is True:
                    return yes
                if cond is False:
                    return no
                return list(dict.fromkeys([*yes, *no]))
        if _IDENT.fullmatch(t):
            local = self._local_scalar(f, fn, pos, t)
            if local is not None:
                return self._values(f, fn, local[1], local[0], env, depth + 1)
        guarded = self._guard_values(f, fn, pos, t)
        if guarded:
            return list(guarded)
        raise Unresolved(f"op value {t} is only known at run time")

    @staticmethod
    def _find_top(text: str, char: str, start: int = 0) -> int | None:
        depth = 0
        for i in range(start, len(text)):
            c = text[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == char and depth == 0:
                if char == ":" and (text[i + 1 : i + 2] == ":" or text[i - 1 : i] == ":"):
                    continue
                return i
        return None

    def _local_scalar(self, f: SourceFile, fn: Function, pos: int, name: str) -> tuple[str, int] | None:
        """`T name = expr;` before `pos` in the function, when nothing reassigns it: (expr, position)."""
        code = f.code
        best: tuple[str, int] | None = None
        for m in _scalar_pattern(name).finditer(code, fn.open, pos):
            if re.match(r"(return|else|case)\b", m.group()):
                continue
            end = _to_semicolon(code, m.end(), fn.close)
            best = (code[m.end() : end - 1], m.end())
        if best is not None and _reassigned(name).search(code, best[1], pos):
            return None  # changed after its declaration: only known at run time
        return best

    def _guard_values(self, f: SourceFile, fn: Function, pos: int, expr: str) -> set[str]:
        """Values `expr` can have at `pos` from enclosing `if (expr == A || expr == B)` guards."""
        key = re.sub(r"\s+", "", expr)
        for stmt, part in reversed(path_to(f.body(fn), pos)):
            if stmt.kind != "if" or not stmt.head:
                continue
            head = f.code[stmt.head[0] : stmt.head[1]]
            if part == "head":
                cut = pos - stmt.head[0]
                conjuncts = [c for c, off in split_top(head, "&&") if off + len(c) <= cut]
            elif part == "then":
                conjuncts = [c for c, _ in split_top(head, "&&")]
            else:
                continue
            for conj in conjuncts:
                values: set[str] = set()
                for alt, _ in split_top(strip_parens(conj), "||"):
                    m = re.fullmatch(r"(.+?)\s*==\s*(.+)", strip_parens(alt))
                    if not m:
                        values = set()
                        break
                    left, right = re.sub(r"\s+", "", m.group(1)), re.sub(r"\s+", "", m.group(2))
                    side = right if left == key else left if right == key else None
                    op = self._op_re.match(side) if side else None
                    if not op:
                        values = set()
                        break
                    values.add(op.group(1))
                if values:
                    return values
        return set()

    def _eval_list(
        self,
        f: SourceFile,
        fn: Function | None,
        pos: int,
        text: str,
        env: dict[str, object],
        count_text: str | None,
        depth: int = 0,
    ) -> list[Variant]:
        if depth > 6:
            raise Unresolved(f"cannot follow {text.strip()}")
        t = self._unwrap(text)
        if t.startswith("{"):
            return [Variant(ops) for ops in self._brace(f, fn, pos, t, env)]
        m = re.fullmatch(r"(\w+)\s*\+\s*(.+)", t)
        if m and fn is not None:
            return self._offset_list(f, fn, pos, m.group(1), m.group(2), env, count_text)
        m = re.fullmatch(r"(\w+)(?:\s*\[\s*\w+\s*\])?\s*(?:\.|->)\s*(\w+)", t)
        if m and fn is not None:
            return self._table(f, fn, pos, m.group(1), m.group(2), t)
        if _IDENT.fullmatch(t):
            d = self._definition(f, fn, pos, t)
            if fn is not None and (d is None or d.func is None):
                alias = self._local_scalar(f, fn, pos, t)
                if alias is not None:  # `const auto & ops = other;`
                    return self._eval_list(f, fn, alias[1], alias[0], env, count_text, depth + 1)
            if d is None:
                raise Unresolved(f"op list {t} is not defined in this backend or a shared header")
            if d.init is not None:
                close = match_forward(d.file.code, d.init)
                body = d.file.code[d.init : close + 1]
                where = d.func if d.func is not None else None
                lists = self._brace(d.file, where, d.init, body, env if d.file is f else {})
                how = f"list {t}" + (f" ({d.file.path})" if d.file is not f else "")
                return [Variant(ops, how=how) for ops in lists]
            if d.func is not None and fn is not None and d.file is f:
                return self._simulate(f, fn, d, t, pos, env, count_text, offset=0)
            raise Unresolved(f"op list {t} has no initializer here")
        raise Unresolved(f"op list {t[:60]} is an expression the scanner does not follow")

    def _brace(
        self, f: SourceFile, fn: Function | None, pos: int, text: str, env: dict[str, object]
    ) -> list[tuple[str, ...]]:
        inner = text.strip()
        if inner.startswith("{"):
            inner = inner[1 : match_forward(inner, 0)]
        options: list[list[str]] = []
        for elem, _ in split_top(inner):
            if not elem:
                continue
            if fn is None:
                value = self._constant(elem)
                if not isinstance(value, str):
                    raise Unresolved(f"element {elem} of a shared list is not an op constant")
                options.append([value])
                continue
            vals = [v for v in self._values(f, fn, pos, elem, env) if isinstance(v, str)]
            if not vals:
                raise Unresolved(f"element {elem} is not an op")
            options.append(vals)
        combos = list(itertools.islice(itertools.product(*options), MAX_VARIANTS + 1))
        if len(combos) > MAX_VARIANTS:
            raise Unresolved(f"more than {MAX_VARIANTS} op lists possible here")
        return [tuple(c) for c in combos]

    def _offset_list(
        self,
        f: SourceFile,
        fn: Function,
        pos: int,
        base: str,
        offset: str,
        env: dict[str, object],
        count_text: str | None,
    ) -> list[Variant]:
        off = offset.strip()
        before = f.code[fn.open : pos]
        if _INT.match(off):
            start = int(off)
        elif _IDENT.fullmatch(off) and re.search(rf"\b{re.escape(off)}\s*=\s*0\s*[;,)]", before):
            start = 0  # a counter from 0: the first window
        else:
            raise Unresolved(f"op list {base} + {off}: the offset is only known at run time")
        d = self._definition(f, fn, pos, base)
        if d is None or d.init is not None or d.func is None:
            raise Unresolved(f"op list {base} + {off} is not a list built in this function")
        return self._simulate(f, fn, d, base, pos, env, count_text, offset=start)

    def _table(
        self, f: SourceFile, fn: Function, pos: int, var: str, member: str, text: str
    ) -> list[Variant]:
        """`for (auto & row : TABLE) ... row.member`: every row of the registry is a fusion."""
        iterable: str | None = None
        for stmt, part in path_to(f.body(fn), pos):
            if stmt.kind == "loop" and part == "body" and stmt.head:
                header = f.code[stmt.head[0] : stmt.head[1]]
                pieces = re.split(r"(?<!:):(?!:)", header)
                if len(pieces) == 2 and re.search(rf"\b{re.escape(var)}\s*$", pieces[0]):
                    iterable = pieces[1].strip()
        if iterable is None:
            m = re.search(r"\b(\w+)\s*\[\s*\w+\s*\]\s*$", var)
            iterable = m.group(1) if m else None
        if iterable is None:
            if fn.param_index(var) is not None:
                raise Unresolved(f"{text}: {var} is a parameter, the list is chosen by the caller")
            raise Unresolved(f"{text}: {var} is neither a loop over a table nor a list")
        d = self._definition(f, fn, pos, iterable) if _IDENT.fullmatch(iterable) else None
        if d is None or d.init is None:
            raise Unresolved(f"{text}: table {iterable} has no initializer to read")
        code = d.file.code
        close = match_forward(code, d.init)
        out: list[Variant] = []
        for row, off in split_top(code[d.init + 1 : close]):
            if not row:
                continue
            row_pos = d.init + 1 + off
            elems = split_top(row[1 : match_forward(row, 0)]) if row.startswith("{") else [(row, 0)]
            lists: list[tuple[str, ...]] | None = None
            for elem, _ in elems:
                named = re.fullmatch(rf"\.{re.escape(member)}\s*=\s*(.+)", elem, re.S)
                candidate = named.group(1) if named else elem
                try:
                    lists = self._row_list(d.file, candidate)
                except Unresolved:
                    lists = None
                if lists is not None or named:
                    break
            if not lists:
                raise Unresolved(f"a row of table {iterable} has no op list the scanner can read")
            self._table_functions |= {e for e, _ in elems if _IDENT.fullmatch(e)}
            kinds = self._row_unary(d.file, [e for e, _ in elems])
            for ops in lists:
                out.append(Variant(ops, d.file, row_pos, f"table {iterable}", kinds))
        return out

    def _row_list(self, f: SourceFile, text: str) -> list[tuple[str, ...]] | None:
        t = self._unwrap(text)
        if t.startswith("{"):
            elems = [e for e, _ in split_top(t[1 : match_forward(t, 0)]) if e]
            if elems and all(isinstance(self._constant(e), str) for e in elems):
                return [tuple(str(self._constant(e)) for e in elems)]
            return None
        if _IDENT.fullmatch(t):
            d = self._definition(f, None, 0, t)
            if d is None or d.init is None:
                return None
            body = d.file.code[d.init : match_forward(d.file.code, d.init) + 1]
            elems = [e for e, _ in split_top(body[1:-1]) if e]
            if elems and all(isinstance(self._constant(e), str) for e in elems):
                return [tuple(str(self._constant(e)) for e in elems)]
        return None

    def _row_unary(self, f: SourceFile, elems: list[str]) -> tuple[str, ...] | None:
        if self._unary_re is None:
            return None
        prefix = re.escape(self.rule.unary_prefix)
        kinds: set[str] = set()
        for elem in elems:
            helper = self._function(elem) if _IDENT.fullmatch(elem) else None
            if helper is not None:
                hf, hfn = helper
                kinds |= set(re.findall(rf"{prefix}(\w+)", hf.code[hfn.open : hfn.close]))
        return (kinds.pop(),) if len(kinds) == 1 else None

    # -- definitions --

    def _definition(self, f: SourceFile, fn: Function | None, pos: int, name: str) -> Definition | None:
        if fn is not None:
            local = [
                d
                for d in self._defs_in(f, name)
                if d.func is not None and d.func.open == fn.open and d.name_pos < pos
            ]
            if local:
                return local[-1]
        for source in (f, *[x for x in self.files if x is not f], *self.shared):
            glob = [d for d in self._defs_in(source, name) if d.func is None]
            if glob:
                return glob[0]
        return None

    def _defs_in(self, f: SourceFile, name: str) -> list[Definition]:
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
                if m and self._is_declaration(code, pos):
                    found.append(Definition(f, pos, m.end() - 1, None, f.function_at(pos)))
                else:
                    m = decl.match(code, pos)
                    if m and self._is_declaration(code, pos):
                        found.append(Definition(f, pos, None, m.group("ctor"), f.function_at(pos)))
            pos = code.find(name, nxt)
        self._defs[key] = found
        return found

    @staticmethod
    def _is_declaration(code: str, name_pos: int) -> bool:
        """A type (not an operator or `return`) precedes the name."""
        before = code[max(0, name_pos - 80) : name_pos].rstrip()
        if not before or before[-1] not in "_>*&" and not before[-1].isalnum():
            return False
        word = re.search(r"(\w+)$", before)
        return not (word and word.group(1) in ("return", "case", "else", "sizeof", "new", "delete"))

    # -- lists built at run time --

    def _simulate(
        self,
        f: SourceFile,
        fn: Function,
        d: Definition,
        name: str,
        site: int,
        env: dict[str, object],
        count_text: str | None,
        offset: int,
    ) -> list[Variant]:
        states = self._run(f, fn, f.body(fn), [State()], name, d, site, env, in_loop=False)
        count: int | None = None
        if count_text is not None:
            t = count_text.strip()
            if _INT.match(t):
                count = int(re.sub(r"[uUlL]+$", "", t))
            elif _IDENT.fullmatch(t):
                try:
                    vals = self._values(f, fn, site, t, env)
                except Unresolved:
                    vals = []
                if len(vals) == 1 and isinstance(vals[0], int) and not isinstance(vals[0], bool):
                    count = vals[0]
        out: list[Variant] = []
        for st in states:
            if st.dead:
                continue
            elems = list(st.elems)
            if st.fill is not None:
                width = count if count is not None else max(len(elems) - offset, 2)
                elems += [None] * max(0, offset + width - len(elems))
                elems = [st.fill if e is None else e for e in elems]
            window = elems[offset : offset + count] if count is not None else elems[offset:]
            if count is not None and len(window) < count:
                raise Unresolved(f"op list {name} has fewer elements than the count {count}")
            if not window or any(e is None for e in window):
                raise Unresolved(f"op list {name}: some elements are never set before the call")
            out.append(Variant(tuple(str(e) for e in window), how=f"run-time list {name}"))
        return out

    def _run(
        self,
        f: SourceFile,
        fn: Function,
        stmts: Sequence[Stmt],
        states: list[State],
        name: str,
        d: Definition,
        site: int,
        env: dict[str, object],
        in_loop: bool,
    ) -> list[State]:
        """Run `stmts` on the live states; states that returned or left the iteration ride along."""
        for stmt in stmts:
            active = [s for s in states if not (s.dead or s.stopped)]
            if not active:
                return states
            done = [s for s in states if s.dead or s.stopped]
            holds_site = stmt.start <= site < stmt.end
            if stmt.end <= d.name_pos and not holds_site:
                continue
            if stmt.start <= d.name_pos < stmt.end and not holds_site:
                if stmt.kind == "simple":
                    states = done + [self._declare(f, fn, stmt, d, env) for _ in active[:1]]
                continue
            if holds_site:
                return done + self._enter(f, fn, stmt, active, name, d, site, env)
            states = self._dedupe(done + self._exec(f, fn, stmt, active, name, d, site, env, in_loop))
            self._cap(states)
        return states

    def _enter(
        self,
        f: SourceFile,
        fn: Function,
        stmt: Stmt,
        states: list[State],
        name: str,
        d: Definition,
        site: int,
        env: dict[str, object],
    ) -> list[State]:
        """Descend into the statement holding the call site: run what precedes it on the way."""
        if stmt.kind == "block" or stmt.kind == "switch":
            return self._run(f, fn, stmt.body, states, name, d, site, env, False)
        if stmt.kind == "if":
            if stmt.then and stmt.then.start <= site < stmt.then.end:
                return self._run(f, fn, [stmt.then], states, name, d, site, env, False)
            if stmt.other and stmt.other.start <= site < stmt.other.end:
                return self._run(f, fn, [stmt.other], states, name, d, site, env, False)
            return states
        if stmt.kind == "loop" and stmt.other is not None and stmt.other.start <= site < stmt.other.end:
            return self._run(f, fn, [stmt.other], states, name, d, site, env, False)
        return states

    def _exec(
        self,
        f: SourceFile,
        fn: Function,
        stmt: Stmt,
        states: list[State],
        name: str,
        d: Definition,
        site: int,
        env: dict[str, object],
        in_loop: bool,
    ) -> list[State]:
        code = f.code
        if stmt.kind == "jump":
            kill = stmt.word == "return" or not in_loop
            return [State(s.elems, s.fill, s.dead or kill, s.stopped or not kill) for s in states]
        if stmt.kind == "label":
            return states
        if stmt.kind == "simple":
            return self._write(f, fn, stmt, states, name, env)
        if stmt.kind == "block":
            return self._run(f, fn, stmt.body, states, name, d, site, env, in_loop)
        if stmt.kind == "if" and stmt.head:
            cond = self._cond(code[stmt.head[0] : stmt.head[1]], env)
            taken = (
                self._run(f, fn, [stmt.then], states, name, d, site, env, in_loop)
                if stmt.then and cond is not False
                else []
            )
            skipped: list[State] = []
            if cond is not True:
                skipped = (
                    self._run(f, fn, [stmt.other], states, name, d, site, env, in_loop)
                    if stmt.other
                    else states
                )
            return self._dedupe([*taken, *skipped])
        if stmt.kind == "loop" and stmt.other is not None:
            if not re.search(rf"\b{re.escape(name)}\b", code[stmt.start : stmt.end]):
                return states
            # Twice round: a list extended in a loop is a chain (X+X stands for two or more X).
            out = states
            for _ in range(2):
                out = self._run(f, fn, [stmt.other], out, name, d, site, env, True)
                out = [State(s.elems, s.fill, s.dead, False) for s in out]
            return out
        if stmt.kind == "switch" and re.search(rf"\b{re.escape(name)}\b", code[stmt.start : stmt.end]):
            raise Unresolved(f"op list {name} is written inside a switch")
        return states

    def _declare(
        self, f: SourceFile, fn: Function, stmt: Stmt, d: Definition, env: dict[str, object]
    ) -> State:
        if d.ctor:
            args = split_top(d.ctor)
            if len(args) == 2:
                vals = self._values(f, fn, stmt.start, args[1][0], env)
                if len(vals) == 1 and isinstance(vals[0], str):
                    return State((), vals[0])
                raise Unresolved(f"op list filled with {args[1][0]}, known only at run time")
        return State()

    def _write(
        self, f: SourceFile, fn: Function, stmt: Stmt, states: list[State], name: str, env: dict[str, object]
    ) -> list[State]:
        text = f.code[stmt.start : stmt.end].strip().rstrip(";").strip()
        if not re.search(rf"\b{re.escape(name)}\b", text):
            return states
        n = re.escape(name)
        pos = stmt.start
        m = re.fullmatch(rf"{n}\s*\[\s*(\d+)\s*\]\s*=\s*(.+)", text, re.S)
        if m:
            return self._fork(
                f, fn, pos, m.group(2), env, states, lambda s, v: self._set(s, int(m.group(1)), v)
            )
        m = re.fullmatch(rf"{n}\s*\[\s*\w+\s*(?:\+\+)?\s*\]\s*=\s*(.+)", text, re.S)
        if m:
            return self._fork(f, fn, pos, m.group(1), env, states, lambda s, v: State((*s.elems, v), s.fill))
        m = re.fullmatch(rf"{n}\s*\.\s*(?:push_back|emplace_back)\s*\((.+)\)", text, re.S)
        if m:
            return self._fork(f, fn, pos, m.group(1), env, states, lambda s, v: State((*s.elems, v), s.fill))
        m = re.fullmatch(
            rf"{n}\s*\.\s*insert\s*\(\s*{n}\s*\.\s*end\s*\(\s*\)\s*,\s*(\{{.*\}})\s*\)", text, re.S
        )
        if m:
            lists = self._brace(f, fn, pos, m.group(1), env)
            return self._dedupe([State((*s.elems, *ops), s.fill) for s in states for ops in lists])
        m = re.fullmatch(rf"{n}\s*=\s*(\{{.*\}})", text, re.S)
        if m:
            lists = self._brace(f, fn, pos, m.group(1), env)
            return self._dedupe([State(tuple(ops), None) for s in states for ops in lists])
        m = re.fullmatch(rf"std\s*::\s*fill(?:_n)?\s*\(\s*{n}\b[^,]*,[^,]+,\s*(.+)\)", text, re.S)
        if m:
            return self._fork(f, fn, pos, m.group(1), env, states, lambda s, v: State(s.elems, v))
        if re.fullmatch(rf"{n}\s*\.\s*clear\s*\(\s*\)", text):
            return [State((), None) for _ in states]
        if re.search(
            rf"\b{n}\s*(?:\[[^\]]*\]\s*)?=(?!=)|\b{n}\s*\.\s*(?:assign|resize|insert|push_back)\b", text
        ):
            raise Unresolved(f"op list {name} is written in a way the scanner does not follow")
        return states

    def _set(self, s: State, index: int, value: str) -> State:
        elems = list(s.elems) + [None] * max(0, index + 1 - len(s.elems))
        elems[index] = value
        return State(tuple(elems), s.fill)

    def _fork(
        self,
        f: SourceFile,
        fn: Function,
        pos: int,
        expr: str,
        env: dict[str, object],
        states: list[State],
        apply: object,
    ) -> list[State]:
        values = [v for v in self._values(f, fn, pos, expr, env) if isinstance(v, str)]
        if not values:
            raise Unresolved(f"{expr.strip()} is not an op")
        assert callable(apply)
        return self._dedupe([apply(s, v) for s in states for v in values])

    @staticmethod
    def _dedupe(states: list[State]) -> list[State]:
        seen: dict[tuple[object, ...], State] = {}
        for s in states:
            seen.setdefault((s.elems, s.fill, s.dead, s.stopped), s)
        return list(seen.values())

    @staticmethod
    def _cap(states: list[State]) -> None:
        if len(states) > MAX_VARIANTS:
            raise Unresolved(f"more than {MAX_VARIANTS} op lists possible here")

    # -- other shapes --

    def _scan_case_next(self, f: SourceFile) -> None:
        """`case OP_A: ... nodes[i + 1]->op == OP_B` : a hand-written check that the next node is B."""
        prefix = re.escape(self.rule.op_prefix)
        if "->op" not in f.code or "case" not in f.code or not _NEXT_NODE_OP.search(f.code):
            return
        for m in re.finditer(rf"\bcase\s+{prefix}(\w+)\s*:", f.code):
            fn = f.function_at(m.start())
            if fn is None or self.options.reorder.search(fn.name):
                continue
            end = self._case_end(f.code, m.end(), fn.close)
            region = f.code[m.end() : end]
            found: dict[int, str] = {}
            where: dict[int, int] = {}
            for c in re.finditer(rf"\[\s*\w+\s*\+\s*([12])\s*\]\s*->\s*op\s*==\s*{prefix}(\w+)", region):
                found.setdefault(int(c.group(1)), c.group(2))
                where.setdefault(int(c.group(1)), m.end() + c.start())
            for a in re.finditer(r"(\w+)\s*=\s*[^;=]*\[\s*\w+\s*\+\s*([12])\s*\]\s*;", region):
                var, k = a.group(1), int(a.group(2))
                c2 = re.search(rf"\b{re.escape(var)}\s*->\s*op\s*==\s*{prefix}(\w+)", region)
                if c2:
                    found.setdefault(k, c2.group(1))
                    where.setdefault(k, m.end() + c2.start())
            if 1 not in found:
                continue
            ops = (m.group(1), found[1], *((found[2],) if 2 in found else ()))
            self._site_functions.add((f.path, fn.open))
            self._emit(
                f,
                where[1],
                ops,
                None,
                f"case {self.rule.op_prefix}{m.group(1)}: next-node check",
                snippet_pos=where[1],
            )

    @staticmethod
    def _case_end(code: str, start: int, limit: int) -> int:
        depth = 0
        for m in re.finditer(r"[{}]|\bcase\b|\bdefault\s*:", code[start:limit]):
            token = m.group()
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth < 0:
                    return start + m.start()
            elif depth == 0:
                return start + m.start()
        return limit

    def _scan_pattern(self, f: SourceFile) -> None:
        assert self.rule.pattern is not None
        prefix = re.escape(self.rule.op_prefix)
        for m in self.rule.pattern.finditer(f.code):
            text = m.group("ops") if "ops" in self.rule.pattern.groupindex else m.group()
            ops = tuple(re.findall(rf"(?<!\w){prefix}(\w+)", text))
            if ops:
                self._emit(f, m.start(), ops, None, "config pattern", snippet_pos=m.start())

    def _scan_matchers(self, f: SourceFile) -> None:
        """Functions named like fusion matchers that compare node ops by hand: say so, don't guess."""
        prefix = re.escape(self.rule.op_prefix)
        if "fus" not in f.code.lower() or not re.search(r"nodes\s*\[", f.code):
            return
        for fn in f.functions:
            lowered = fn.name.lower()
            if "fus" not in lowered or fn.name in self.predicates or fn.name in self._table_functions:
                continue
            if (f.path, fn.open) in self._site_functions or self.options.reorder.search(fn.name):
                continue
            body = f.code[fn.open : fn.close]
            if not re.search(r"nodes\s*\[", body):
                continue  # checks given tensors (a `should_fuse` helper), does not walk the graph
            ops = [
                op
                for op in dict.fromkeys(re.findall(rf"->\s*op\s*[!=]=\s*{prefix}(\w+)", body))
                if op not in self.options.view_ops
            ]
            if len(ops) >= 2:
                self._unclassified(
                    f,
                    fn.name_pos,
                    f"{fn.name}() matches nodes by hand ({', '.join(ops)}); its op list is not written down",
                )

    def _scan_singles(self, files: Sequence[SourceFile]) -> None:
        if not self.options.single_ops:
            return
        prefix = re.escape(self.rule.op_prefix)
        names = "|".join(re.escape(op) for op in self.options.single_ops)
        seen: set[str] = set()
        # A `case` label: the backend dispatches (or declares support for) the op itself.
        for pattern in (rf"\bcase\s+{prefix}({names})\s*:",):
            for f in files:
                for m in re.finditer(pattern, f.code):
                    if m.group(1) not in seen:
                        seen.add(m.group(1))
                        self.result.singles.append(
                            SingleOp(self.backend, m.group(1), f.path, f.line_of(m.start()))
                        )

    # -- output --

    def _emit(
        self,
        f: SourceFile,
        pos: int,
        raw: tuple[str, ...],
        unary: tuple[str, ...] | None,
        how: str,
        snippet_pos: int,
    ) -> None:
        ops = list(raw)
        if unary:
            slots = [i for i, op in enumerate(ops) if op == self.options.unary_op]
            if len(slots) == len(unary):
                for i, kind in zip(slots, unary, strict=True):
                    ops[i] = f"{self.options.unary_op}:{kind}"
        normal = normalise(ops, self.options.view_ops)
        if len(normal) < 2:
            self._exclude(f, snippet_pos, f"{'+'.join(raw)}: one op left once views are dropped")
            return
        self.result.sites.append(
            Site(self.backend, normal, tuple(ops), f.path, f.line_of(pos), how, f.snippet(snippet_pos))
        )

    def _unclassified(self, f: SourceFile, pos: int, why: str) -> None:
        self.result.unclassified.append(
            Unclassified(self.backend, f.path, f.line_of(pos), f.snippet(pos), why)
        )

    def _exclude(self, f: SourceFile, pos: int, why: str) -> None:
        self.result.excluded.append(Unclassified(self.backend, f.path, f.line_of(pos), f.snippet(pos), why))


@lru_cache(maxsize=4096)
def _scalar_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.>])[\w:<>*&]+\s+{re.escape(name)}\s*=\s*(?!=)")


@lru_cache(maxsize=4096)
def _reassigned(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"(?<![\w.>]){n}\s*(?:[-+*/|&]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*{n}\b")


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


def normalise(ops: Iterable[str], view_ops: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The fusion key: views dropped, runs of one op capped at two (`ADD+ADD` = a chain of ADDs)."""
    out: list[str] = []
    for op in ops:
        if op in view_ops:
            continue
        if len(out) >= 2 and out[-1] == op and out[-2] == op:
            continue
        out.append(op)
    return tuple(out)
