"""Resolving op lists: what a fusion check's op-list argument can be, from what the code writes down.

- literal lists, split across lines, compound literals `(enum op[]){...}`;
- named lists (`const enum ggml_op fuse_ops[] = {...}`, `std::initializer_list<ggml_op> x{...}`) in
  the same function, the same file, another file of the backend or a shared header;
- table-driven registries: `for (auto & f : table) ... can_fuse(..., f.ops)` reads every row;
- loop variables over literal lists (`for (ggml_op op : {A, B})`), ternaries on them and
  `if (node->op == A || node->op == B)` guards giving the possible values.

Lists built at run time are simulated by kb/inventory/simulate.py (the evaluator's `Simulator`,
which reads values back through it). What cannot be resolved raises Unresolved with the reason,
which the scanner reports as unclassified.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from functools import lru_cache

from kb.inventory.csource import (
    IDENT,
    INT,
    Function,
    SourceFile,
    Stmt,
    match_forward,
    path_to,
    split_top,
    strip_parens,
    to_semicolon,
)
from kb.inventory.model import MAX_VARIANTS, Reporter, Rule, Unresolved, Variant
from kb.inventory.simulate import Simulator
from kb.inventory.sources import Sources


class Evaluator:
    """The possible values of op-valued expressions and op lists in one backend's sources (plus the
    shared files, for definitions). The scanner (kb/inventory/scanner.py) and the next-node checks
    (kb/inventory/chains.py) ask it; its `Simulator` follows lists built at run time."""

    def __init__(self, rule: Rule, sources: Sources, reporter: Reporter) -> None:
        self.rule = rule
        self.sources = sources
        self.reporter = reporter
        self.simulator = Simulator(self)
        self.op_re = re.compile(rf"^{re.escape(rule.op_prefix)}(\w+)$")
        self.unary_re = re.compile(rf"^{re.escape(rule.unary_prefix)}(\w+)$") if rule.unary_prefix else None

    # -- evaluation --

    def envs(self, f: SourceFile, fn: Function, pos: int) -> Iterator[dict[str, object]]:
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
                    value = self.constant(elem)
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
                value = self.cond(f.code[stmt.head[0] : stmt.head[1]], env)
                if value is not None and value != (part == "then"):
                    return False
        return True

    def dead(self, f: SourceFile, path: list[tuple[Stmt, str]]) -> bool:
        """A statement on the way is an `if` whose condition is constant (`false && ...`) against
        the branch taken: the code there never runs."""
        for stmt, part in path:
            if stmt.kind in ("if", "loop") and stmt.head and part in ("then", "else", "head", "body"):
                value = self.cond(f.code[stmt.head[0] : stmt.head[1]], {})
                if value is False and part in ("then", "head", "body"):
                    return True
                if value is True and part == "else":
                    return True
        return False

    def constant(self, text: str) -> object | None:
        t = strip_parens(text)
        m = self.op_re.match(t)
        if m:
            return m.group(1)
        if t in ("true", "false"):
            return t == "true"
        if INT.match(t):
            return int(re.sub(r"[uUlL]+$", "", t))
        return None

    def cond(self, text: str, env: dict[str, object]) -> bool | None:
        """Evaluate a condition when it only depends on bound loop variables and constants."""
        t = strip_parens(text)
        for sep, combine in (("||", any), ("&&", all)):
            parts = split_top(t, sep)
            if len(parts) > 1:
                values = [self.cond(p, env) for p, _ in parts]
                if combine is any and any(v is True for v in values):
                    return True
                if combine is all and any(v is False for v in values):
                    return False
                return None if any(v is None for v in values) else combine(bool(v) for v in values)
        if t.startswith("!") and not t.startswith("!="):
            inner = self.cond(t[1:], env)
            return None if inner is None else not inner
        m = re.fullmatch(r"(.+?)\s*(==|!=)\s*(.+)", t)
        if m:
            left = self._scalar(m.group(1), env)
            right = self._scalar(m.group(3), env)
            if left is None or right is None:
                return None
            return (left == right) == (m.group(2) == "==")
        value = self._scalar(t, env)
        if isinstance(value, int):  # bool is an int too; `if (0 && ...)` is as dead as `false`
            return bool(value)
        return None

    def _scalar(self, text: str, env: dict[str, object]) -> object | None:
        t = strip_parens(text)
        if t in env:
            return env[t]
        return self.constant(t)

    def values(
        self, f: SourceFile, fn: Function, pos: int, text: str, env: dict[str, object], depth: int = 0
    ) -> list[object]:
        """The possible values of an op-valued expression at `pos`."""
        t = strip_parens(text)
        if depth > 8:
            raise Unresolved(f"cannot follow {t}")
        constant = self.constant(t)
        if constant is not None:
            return [constant]
        if t in env:
            return [env[t]]
        q = find_top(t, "?")
        if q is not None:
            colon = find_top(t, ":", q + 1)
            if colon is not None:
                cond = self.cond(t[:q], env)
                yes = self.values(f, fn, pos, t[q + 1 : colon], env, depth + 1)
                no = self.values(f, fn, pos, t[colon + 1 :], env, depth + 1)
                if cond is True:
                    return yes
                if cond is False:
                    return no
                return list(dict.fromkeys([*yes, *no]))
        if IDENT.fullmatch(t):
            local = self._local_scalar(f, fn, pos, t)
            if local is not None:
                return self.values(f, fn, local[1], local[0], env, depth + 1)
        guarded = self._guard_values(f, fn, pos, t)
        if guarded:
            return list(guarded)
        raise Unresolved(f"op value {t} is only known at run time")

    def _local_scalar(self, f: SourceFile, fn: Function, pos: int, name: str) -> tuple[str, int] | None:
        """`T name = expr;` before `pos` in the function, when nothing reassigns it: (expr, position)."""
        code = f.code
        best: tuple[str, int] | None = None
        for m in _scalar_pattern(name).finditer(code, fn.open, pos):
            if re.match(r"(return|else|case)\b", m.group()):
                continue
            end = to_semicolon(code, m.end(), fn.close)
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
                    op = self.op_re.match(side) if side else None
                    if not op:
                        values = set()
                        break
                    values.add(op.group(1))
                if values:
                    return values
        return set()

    def eval_list(
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
        t = unwrap(text)
        if t.startswith("{"):
            return [Variant(ops) for ops in self.brace(f, fn, pos, t, env)]
        m = re.fullmatch(r"(\w+)\s*\+\s*(.+)", t)
        if m and fn is not None:
            return self._offset_list(f, fn, pos, m.group(1), m.group(2), env, count_text)
        m = re.fullmatch(r"(\w+)(?:\s*\[\s*\w+\s*\])?\s*(?:\.|->)\s*(\w+)", t)
        if m and fn is not None:
            return self._table(f, fn, pos, m.group(1), m.group(2), t)
        if IDENT.fullmatch(t):
            if fn is not None:  # a loop variable shadows any outer name: for (auto & ops : patterns)
                rows = self.loop_rows(f, fn, pos, t, None, t)
                if rows is not None:
                    return rows
            d = self.sources.definition(f, fn, pos, t)
            if fn is not None and (d is None or d.func is None):
                alias = self._local_scalar(f, fn, pos, t)
                if alias is not None:  # `const auto & ops = other;`
                    return self.eval_list(f, fn, alias[1], alias[0], env, count_text, depth + 1)
            if d is None:
                raise Unresolved(f"op list {t} is not defined in this backend or a shared header")
            if d.init is not None:
                close = match_forward(d.file.code, d.init)
                body = d.file.code[d.init : close + 1]
                where = d.func if d.func is not None else None
                lists = self.brace(d.file, where, d.init, body, env if d.file is f else {})
                how = f"list {t}" + (f" ({d.file.path})" if d.file is not f else "")
                return [Variant(ops, how=how) for ops in lists]
            if d.func is not None and fn is not None and d.file is f:
                return self.simulator.simulate(f, fn, d, t, pos, env, count_text, offset=0)
            raise Unresolved(f"op list {t} has no initializer here")
        raise Unresolved(f"op list {t[:60]} is an expression the scanner does not follow")

    def brace(
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
                value = self.constant(elem)
                if not isinstance(value, str):
                    raise Unresolved(f"element {elem} of a shared list is not an op constant")
                options.append([value])
                continue
            vals = [v for v in self.values(f, fn, pos, elem, env) if isinstance(v, str)]
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
        if INT.match(off):
            start = int(off)
        elif IDENT.fullmatch(off) and re.search(rf"\b{re.escape(off)}\s*=\s*0\s*[;,)]", before):
            start = 0  # a counter from 0: the first window
        else:
            raise Unresolved(f"op list {base} + {off}: the offset is only known at run time")
        d = self.sources.definition(f, fn, pos, base)
        if d is None or d.init is not None or d.func is None:
            raise Unresolved(f"op list {base} + {off} is not a list built in this function")
        return self.simulator.simulate(f, fn, d, base, pos, env, count_text, offset=start)

    def _table(
        self, f: SourceFile, fn: Function, pos: int, var: str, member: str, text: str
    ) -> list[Variant]:
        """`for (auto & row : TABLE) ... row.member`: every row of the registry is a fusion."""
        found = self.loop_rows(f, fn, pos, var, member, text)
        if found is None:
            if fn.param_index(var) is not None:
                raise Unresolved(f"{text}: {var} is a parameter, the list is chosen by the caller")
            raise Unresolved(f"{text}: {var} is neither a loop over a table nor a list")
        return found

    def _loop_binding(self, f: SourceFile, fn: Function, pos: int, var: str) -> tuple[str, int | None] | None:
        """(the iterable, the element index of a structured binding) of the innermost range-for
        around `pos` that binds `var` (`for (auto & var : TABLE)`, `for (auto & [name, var] : TABLE)`)."""
        found: tuple[str, int | None] | None = None
        for stmt, part in path_to(f.body(fn), pos):
            if stmt.kind == "loop" and part == "body" and stmt.head:
                header = f.code[stmt.head[0] : stmt.head[1]]
                pieces = re.split(r"(?<!:):(?!:)", header)
                if len(pieces) != 2:
                    continue
                binding = re.search(r"\[([^\]]*)\]\s*$", pieces[0])
                if binding:
                    names = [n.strip() for n in binding.group(1).split(",")]
                    if var in names:
                        found = (pieces[1].strip(), names.index(var))
                elif re.search(rf"\b{re.escape(var)}\s*$", pieces[0]):
                    found = (pieces[1].strip(), None)
        if found is None:
            m = re.search(r"\b(\w+)\s*\[\s*\w+\s*\]\s*$", var)  # table[k].member
            return (m.group(1), None) if m else None
        return found

    def loop_rows(
        self, f: SourceFile, fn: Function, pos: int, var: str, member: str | None, text: str
    ) -> list[Variant] | None:
        """The op lists a loop variable takes: each row of the table (or braced list) the loop runs
        over, the row itself, its `member`, or the element a structured binding names. None when
        `var` is no loop variable."""
        binding = self._loop_binding(f, fn, pos, var)
        if binding is None:
            return None
        iterable, index = binding
        if iterable.startswith("{"):  # for (const auto * ops : { &a, &b })
            rows_file, label = f, "list"
            at = max(f.code.find(iterable, fn.open), 0)
            inner = iterable[1 : match_forward(iterable, 0)]
            rows = [(elem, at + 1 + off) for elem, off in split_top(inner)]
        else:
            d = self.sources.definition(f, fn, pos, iterable) if IDENT.fullmatch(iterable) else None
            if d is None or d.init is None:
                raise Unresolved(f"{text}: table {iterable} has no initializer to read")
            rows_file, label = d.file, f"table {iterable}"
            close = match_forward(d.file.code, d.init)
            rows = [(row, d.init + 1 + off) for row, off in split_top(d.file.code[d.init + 1 : close])]
        out: list[Variant] = []
        for row, row_pos in rows:
            if not row:
                continue
            lists, elems = self._row_lists(rows_file, row, member, index)
            if not lists:
                raise Unresolved(f"a row of {label} has no op list the scanner can read")
            self.reporter.table_functions |= {e for e in elems if IDENT.fullmatch(e)}
            kinds = self._row_unary(rows_file, elems)
            for ops in lists:
                out.append(Variant(ops, rows_file, row_pos, label, kinds))
        return out

    def _row_lists(
        self, f: SourceFile, row: str, member: str | None, index: int | None
    ) -> tuple[list[tuple[str, ...]] | None, list[str]]:
        """(the op lists of one row, the row's elements)."""
        row = row.strip()
        elems = [e for e, _ in split_top(row[1 : match_forward(row, 0)])] if row.startswith("{") else [row]
        if member is None and index is None:
            whole = self._row_list(f, row)
            if whole is not None:
                return whole, elems
        if index is not None:
            return (self._row_list(f, elems[index]) if index < len(elems) else None), elems
        lists: list[tuple[str, ...]] | None = None
        for elem in elems:
            named = re.fullmatch(rf"\.{re.escape(member or '')}\s*=\s*(.+)", elem, re.S) if member else None
            candidate = named.group(1) if named else elem
            try:
                lists = self._row_list(f, candidate)
            except Unresolved:
                lists = None
            if lists is not None or named:
                break
        return lists, elems

    def _row_list(self, f: SourceFile, text: str) -> list[tuple[str, ...]] | None:
        t = unwrap(text)
        if t.startswith("{"):
            elems = [e for e, _ in split_top(t[1 : match_forward(t, 0)]) if e]
            if elems and all(isinstance(self.constant(e), str) for e in elems):
                return [tuple(str(self.constant(e)) for e in elems)]
            return None
        if IDENT.fullmatch(t):
            d = self.sources.definition(f, None, 0, t)
            if d is None or d.init is None:
                return None
            body = d.file.code[d.init : match_forward(d.file.code, d.init) + 1]
            elems = [e for e, _ in split_top(body[1:-1]) if e]
            if elems and all(isinstance(self.constant(e), str) for e in elems):
                return [tuple(str(self.constant(e)) for e in elems)]
        return None

    def _row_unary(self, f: SourceFile, elems: list[str]) -> tuple[str, ...] | None:
        if self.unary_re is None:
            return None
        prefix = re.escape(self.rule.unary_prefix)
        kinds: set[str] = set()
        for elem in elems:
            helper = self.sources.function(elem) if IDENT.fullmatch(elem) else None
            if helper is not None:
                hf, hfn = helper
                kinds |= set(re.findall(rf"{prefix}(\w+)", hf.code[hfn.open : hfn.close]))
        return (kinds.pop(),) if len(kinds) == 1 else None


def plain_name(text: str) -> str | None:
    """The identifier an argument names (`ops`, `&ops[0]`, `ops.data()`), or None."""
    t = unwrap(text)
    return t if IDENT.fullmatch(t) else None


def unwrap(text: str) -> str:
    """An op-list argument without what only passes it along: `.data()`, `&x[0]`, `*`, casts."""
    t = text.strip()
    t = re.sub(r"\s*(?:\.|->)\s*(?:data|begin)\s*\(\s*\)\s*$", "", t)
    t = re.sub(r"^&\s*(\w+)\s*\[\s*0\s*\]$", r"\1", t)
    t = re.sub(r"^[*&]\s*(?=[A-Za-z_][\w.>\-]*$)", "", t)  # *ops, &named_list, *entry.ops
    t = re.sub(r"^\(\s*(?:const\s+)?(?:enum\s+)?[\w:]+\s*(?:const\s*)?\*\s*\)\s*", "", t)
    t = re.sub(r"^(?:const\s+)?(?:std::)?(?:initializer_list|vector|array)\s*<[^{]*>\s*(?=\{)", "", t)
    t = re.sub(r"^\(\s*(?:const\s+)?(?:enum\s+)?[\w:]+\s*\[\s*\w*\s*\]\s*\)\s*(?=\{)", "", t)
    return t.strip()


def find_top(text: str, char: str, start: int = 0) -> int | None:
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


@lru_cache(maxsize=4096)
def _scalar_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.>])[\w:<>*&]+\s+{re.escape(name)}\s*=\s*(?!=)")


@lru_cache(maxsize=4096)
def _reassigned(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"(?<![\w.>]){n}\s*(?:[-+*/|&]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*{n}\b")
