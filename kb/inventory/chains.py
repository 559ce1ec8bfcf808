"""Hand-written fusion checks: under `case GGML_OP_A:`, a condition that the next nodes are B, C, ...

    case GGML_OP_SOFT_MAX:
        if (fusion && i + 4 < cgraph->n_nodes &&
            cgraph->nodes[i+1]->op == GGML_OP_RESHAPE && cgraph->nodes[i+2]->op == GGML_OP_ARGSORT &&
            cgraph->nodes[i+3]->op == GGML_OP_VIEW    && cgraph->nodes[i+4]->op == GGML_OP_GET_ROWS) {

ik_llama.cpp's CPU and CUDA backends decide their fusions this way. Each condition is one chain, kept
whole (here SOFT_MAX, RESHAPE, ARGSORT, VIEW, GET_ROWS; its key drops the views), with the checks of
the conditions around it (an outer `if` it sits in) and the unary kind the condition names
(`(ggml_unary_op)nodes[i+1]->op_params[0] == GGML_UNARY_OP_SILU`). Each `else if` is a chain of its
own. A condition that is constant false (`if (false && ...)`) is dead code: left out, and said so; a
chain with a node it never checks (i+1 and i+3, not i+2) is reported as unclassified.
"""

from __future__ import annotations

import itertools
import re

from kb.inventory.csource import Function, SourceFile, path_to
from kb.inventory.evaluator import Evaluator
from kb.inventory.model import MAX_VARIANTS, Reporter, Rule, ScanOptions

MAX_OFFSET = 16
"""Farthest next node a chain may check (`nodes[i + 16]`)."""
_NODE_AT = r"(?:\[\s*\w+\s*\+\s*(\d+)\s*\]|ggml_graph_node\s*\(\s*\w+\s*,\s*\w+\s*\+\s*(\d+)\s*\))"
"""The node at offset k: `nodes[i + k]` or `ggml_graph_node(cgraph, i + k)` (k in an unnamed group)."""


def _offset(m: re.Match[str]) -> int:
    """The k of the first node-at-offset in a match (the unnamed groups hold it)."""
    return next(int(g) for g in m.groups() if g is not None and g.isdigit())


_ANY_NEXT = re.compile(_NODE_AT + r"\s*(?:->\s*op\b|;)")


class NextNodeChecks:
    """Finds the chains a backend checks by hand under `case` labels, reporting them (and what it
    cannot read) to the backend's `Reporter`; conditions are judged by its `Evaluator`."""

    def __init__(self, rule: Rule, options: ScanOptions, ev: Evaluator, reporter: Reporter) -> None:
        self.rule = rule
        self.options = options
        self.ev = ev
        self.reporter = reporter

    def scan(self, f: SourceFile) -> None:
        """Every chain under a `case GGML_OP_X:` label of the file."""
        prefix = re.escape(self.rule.op_prefix)
        if "->op" not in f.code or "case" not in f.code or not _ANY_NEXT.search(f.code):
            return
        check = re.compile(_NODE_AT + rf"\s*->\s*op\s*==\s*{prefix}(?P<op>\w+)")
        for m in re.finditer(rf"\bcase\s+{prefix}(\w+)\s*:", f.code):
            fn = f.function_at(m.start())
            if fn is None or self.options.reorder.search(fn.name):
                continue
            end = case_end(f.code, m.end(), fn.close)
            checks = self._checks(f, check, m.end(), end)
            if not checks:
                continue
            self.reporter.site_functions.add((f.path, fn.open))
            for head, found in by_condition(f, fn, checks, m.end(), end).items():
                self._chain(f, fn, m.group(1), head, found, m.end(), end)

    def _checks(
        self, f: SourceFile, check: re.Pattern[str], start: int, end: int
    ) -> list[tuple[int, int, str]]:
        """(position, offset, op) of every "node i+k is op X" test in the region, aliases included
        (`ggml_tensor * next = cgraph->nodes[i+1]; ... next->op == X`)."""
        code = f.code
        found = [(start + c.start(), _offset(c), c.group("op")) for c in check.finditer(code[start:end])]
        prefix = re.escape(self.rule.op_prefix)
        for a in re.finditer(r"(\w+)\s*=\s*[^;=]*?" + _NODE_AT + r"\s*;", code[start:end]):
            var, k = a.group(1), _offset(a)
            for c in re.finditer(rf"\b{re.escape(var)}\s*->\s*op\s*==\s*{prefix}(\w+)", code[start:end]):
                found.append((start + c.start(), k, c.group(1)))
        return sorted(p for p in found if 1 <= p[1] <= MAX_OFFSET)

    def _chain(
        self,
        f: SourceFile,
        fn: Function,
        first: str,
        head: int,
        checks: list[tuple[int, int, str]],
        start: int,
        end: int,
    ) -> None:
        pos = checks[0][0]
        path = [(s, part) for s, part in path_to(f.body(fn), pos) if s.start < end]
        if self.ev.dead(f, path):
            self.reporter.exclude(f, pos, f"{self.rule.op_prefix}{first}: a next-node check in dead code")
            return
        # The conditions of the `if`s this one sits in (their then-branch) constrain the chain too.
        outer: list[tuple[int, int, str]] = []
        for stmt, part in path[:-1]:
            if stmt.kind in ("if", "loop") and part in ("then", "body") and stmt.head and stmt.start >= start:
                lo, hi = stmt.head
                outer += [c for c in self._checks_in(f, lo, hi, start, end)]
        options: dict[int, list[str]] = {}
        for _, k, op in [*outer, *checks]:
            if op not in options.setdefault(k, []):
                options[k].append(op)
        last = max(options)
        missing = [k for k in range(1, last + 1) if k not in options]
        if missing:
            self.reporter.unclassified(
                f, pos, f"next-node check of {first} skips node i+{missing[0]}: the chain is not written down"
            )
            return
        kinds = self._unary_kinds(f, head, end)
        combos = list(
            itertools.islice(itertools.product(*(options[k] for k in range(1, last + 1))), MAX_VARIANTS + 1)
        )
        if len(combos) > MAX_VARIANTS:
            self.reporter.unclassified(f, pos, f"more than {MAX_VARIANTS} chains possible here")
            return
        first_kind = self._enclosing_unary_case(f, start, pos) if first == self.options.unary_op else None
        for combo in combos:
            ops = [first if first_kind is None else f"{first}:{first_kind}", *combo]
            for k, kind in kinds.items():
                if k < len(ops) and ops[k] == self.options.unary_op:
                    ops[k] = f"{self.options.unary_op}:{kind}"
            how = f"case {self.rule.op_prefix}{first}: next-node check"
            self.reporter.emit(f, pos, tuple(ops), None, how, snippet_pos=pos)

    def _enclosing_unary_case(self, f: SourceFile, start: int, pos: int) -> str | None:
        """`case GGML_OP_UNARY: switch (kind) { case GGML_UNARY_OP_SIGMOID: <check> }`: the kind."""
        if not self.rule.unary_prefix:
            return None
        prefix = re.escape(self.rule.unary_prefix)
        for m in reversed(list(re.finditer(rf"\bcase\s+{prefix}(\w+)\s*:", f.code[start:pos]))):
            if case_end(f.code, start + m.end(), pos + 1) >= pos:
                return m.group(1)
        return None

    def _checks_in(self, f: SourceFile, lo: int, hi: int, start: int, end: int) -> list[tuple[int, int, str]]:
        prefix = re.escape(self.rule.op_prefix)
        check = re.compile(_NODE_AT + rf"\s*->\s*op\s*==\s*{prefix}(?P<op>\w+)")
        return [c for c in self._checks(f, check, start, end) if lo <= c[0] < hi]

    def _unary_kinds(self, f: SourceFile, head: int, end: int) -> dict[int, str]:
        """Offset -> unary kind the condition starting at `head` names for that node."""
        if not self.rule.unary_prefix:
            return {}
        text_end = min(end, f.code.find("{", head) if f.code.find("{", head) > 0 else end)
        region = f.code[head:text_end]
        prefix = re.escape(self.rule.unary_prefix)
        kinds: dict[int, str] = {}
        pattern = (
            rf"(?:{_NODE_AT}\s*->\s*op_params\s*\[\s*0\s*\]|ggml_get_unary_op\s*\(\s*[\w>\-]*?{_NODE_AT}\s*\))"
            rf"\s*\)?\s*==\s*{prefix}(?P<kind>\w+)"
        )
        for m in re.finditer(pattern, region):
            kinds.setdefault(_offset(m), m.group("kind"))
        return kinds


def case_end(code: str, start: int, limit: int) -> int:
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


def by_condition(
    f: SourceFile, fn: Function, checks: list[tuple[int, int, str]], start: int, end: int
) -> dict[int, list[tuple[int, int, str]]]:
    """Checks grouped by the condition (or statement) that holds them, keyed by its start."""
    groups: dict[int, list[tuple[int, int, str]]] = {}
    for check in checks:
        path = [(s, part) for s, part in path_to(f.body(fn), check[0]) if start <= s.start < end]
        key = path[-1][0].start if path else check[0]
        groups.setdefault(key, []).append(check)
    return groups
