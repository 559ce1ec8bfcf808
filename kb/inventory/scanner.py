"""Scanning one backend for operator fusions: the fusion predicates, their call sites, the other shapes.

Each call to a fusion predicate (`ggml_can_fuse(cgraph, i, {GGML_OP_RMS_NORM, GGML_OP_MUL})` and its
relatives, or the calls a project names in its config) has its op list resolved by the evaluator:

- helper functions that forward one of their parameters to a predicate (wrappers of wrappers too,
  wherever in the backend or the shared files they are defined), and functions that compare a
  parameter list against `node->op` element by element (matchers): kb/inventory/predicates.py;
- unary kinds from a second argument (`{GGML_UNARY_OP_SILU}`) or from the one helper that checks it;
- hand-written "the next nodes are ops X, Y, ..." checks under a `case GGML_OP_...:` label, one chain
  per condition, kept whole: kb/inventory/chains.py.

`BackendScanner` holds its parts, each given what it needs: the `Sources` (definitions looked up),
the `Reporter` (what is found or left out), the `Evaluator` (op values and lists, with its
`Simulator` for lists built at run time) and the `NextNodeChecks`.

Look-alikes are dropped: calls in comments or dead code (`#if 0`, `if (false && ...)`), calls inside
graph-reordering functions (`*graph_optimize*`, `*reorder*`), and calls that start at an offset
(`i + k`) to extend an earlier match. What cannot be resolved is reported as unclassified with the
reason, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kb.inventory.chains import NextNodeChecks
from kb.inventory.csource import IDENT, Function, SourceFile, path_to, split_top, strip_parens
from kb.inventory.evaluator import Evaluator, plain_name, unwrap
from kb.inventory.model import (
    MAX_VARIANTS,
    BackendResult,
    Reporter,
    Rule,
    ScanOptions,
    SingleOp,
    Unresolved,
    Variant,
)
from kb.inventory.predicates import Predicate, call_args, call_re, find_predicates, positions
from kb.inventory.sources import Sources

_BY_HAND = re.compile(
    r"nodes\s*\[\s*\w+\s*\+\s*(?P<k>\w+)\s*\]\s*->\s*op\s*[!=]=\s*"
    r"(?P<list>\w+)\s*(?:\.\s*begin\s*\(\s*\)\s*)?\[\s*(?P=k)\s*\]"
)
"""`nodes[i + k]->op == ops[k]`: a node compared with the k-th element of a list, by hand."""


class BackendScanner:
    """All the analysis of one backend (its files, plus shared files for definitions): the predicates
    and their call sites here, op lists resolved by its `Evaluator`, next-node chains by its
    `NextNodeChecks`, everything reported to its `Reporter`."""

    def __init__(
        self,
        backend: str,
        files: Sequence[SourceFile],
        shared: Sequence[SourceFile],
        rule: Rule,
        options: ScanOptions,
    ) -> None:
        self.backend = backend
        self.rule = rule
        self.options = options
        self.files = list(files)
        self.shared = list(shared)
        self.reporter = Reporter(backend, options)
        self.sources = Sources(files, shared)
        self.ev = Evaluator(rule, self.sources, self.reporter)
        self.chains = NextNodeChecks(rule, options, self.ev, self.reporter)
        self.predicates: dict[str, Predicate] = {}

    # -- entry point --

    def scan(self) -> BackendResult:
        relevant = [f for f in self.files if self.rule.op_prefix in f.raw or self._mentions_calls(f)]
        # Wrappers may be defined in any file of the backend, or in a shared header.
        self.predicates = find_predicates(self.rule.calls, [*relevant, *self.shared])
        for f in relevant:
            self._scan_calls(f)
            self.chains.scan(f)
            self._scan_loop_matches(f)
            self._scan_other_calls(f)
            if self.rule.pattern is not None:
                self._scan_pattern(f)
        for f in relevant:
            self._scan_matchers(f)
        self._scan_singles(relevant)
        return self.reporter.result

    def _mentions_calls(self, f: SourceFile) -> bool:
        return any(name in f.raw for name in self.rule.calls)

    # -- predicates: the configured calls, their wrappers and op-list matchers --

    # -- call sites --

    def _scan_calls(self, f: SourceFile) -> None:
        if not any(n in f.code for n in self.predicates):
            return
        for m in call_re(self.predicates).finditer(f.code):
            fn = f.function_at(m.start())
            if fn is None or m.start() == fn.name_pos:
                continue  # a declaration or the definition itself
            if self.options.reorder.search(fn.name):
                self.reporter.exclude(f, m.start(), f"in {fn.name}(), which only reorders the graph")
                continue
            pred = self.predicates[m.group(1)]
            if pred.name == fn.name:
                continue  # recursion inside a helper
            if self.ev.dead(f, path_to(f.body(fn), m.start())):
                self.reporter.exclude(
                    f, m.start(), f"{pred.name}() in dead code (a condition that is always false)"
                )
                continue
            args = call_args(f, m.end() - 1)
            try:
                self._site(f, fn, m.start(), pred, args)
            except Unresolved as exc:
                self.reporter.unclassified(f, m.start(), str(exc))
                self.reporter.site_functions.add((f.path, fn.open))

    def _site(
        self, f: SourceFile, fn: Function, pos: int, pred: Predicate, args: list[tuple[str, int]]
    ) -> None:
        ops_i, count_i, index_i = positions(pred, args)
        if ops_i is None or ops_i >= len(args):
            raise Unresolved(f"no op list among the arguments of {pred.name}()")
        ops_text, ops_pos = args[ops_i]
        if plain_name(ops_text) is not None and fn.param_index(plain_name(ops_text) or "") is not None:
            return  # forwards its parameter: a helper, the callers are the sites
        if index_i is not None and index_i < len(args):
            self._check_start(f, fn, args[index_i][0], pos)
        unary = self._unary_arg(f, fn, args, ops_i, count_i, index_i)
        count_text = args[count_i][0] if count_i is not None and count_i < len(args) else None
        how = pred.how if pred.how != "call" else pred.name
        found: dict[tuple[str, ...], Variant] = {}
        for env in self.ev.envs(f, fn, pos):
            for v in self.ev.eval_list(f, fn, ops_pos, ops_text, env, count_text):
                key = v.ops
                if key not in found:
                    found[key] = v
                if len(found) > MAX_VARIANTS:
                    raise Unresolved(f"more than {MAX_VARIANTS} op lists possible here")
        if not found:
            raise Unresolved("no reachable op list (every path returns before the call)")
        self.reporter.site_functions.add((f.path, fn.open))
        for v in found.values():
            kinds = v.unary if v.unary is not None else unary
            if kinds is None and self.options.unary_op in v.ops:
                kinds = self._infer_unary(f, fn, pos)
            self.reporter.emit(
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
        if m and IDENT.fullmatch(m.group(2)):
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
        if self.ev.unary_re is None:
            return None
        for i, (text, _) in enumerate(args):
            if i in (ops_i, count_i, index_i) or i == 0:
                continue
            t = unwrap(text)
            if not t.startswith("{"):
                continue
            elems = [e for e, _ in split_top(t[1:-1]) if e]
            if not elems:
                continue
            kinds = [self.ev.unary_re.match(e) for e in elems]
            if all(kinds):
                return tuple(k.group(1) for k in kinds if k)
            if any("unary" in e.lower() for e in elems):
                return ()  # kinds computed at run time: the fusion holds for several, name none
        return None

    def _infer_unary(self, f: SourceFile, fn: Function, pos: int) -> tuple[str, ...] | None:
        """The unary kind when the one helper deciding this fusion checks exactly one."""
        if self.ev.unary_re is None:
            return None
        prefix = re.escape(self.rule.unary_prefix)
        for stmt, part in reversed(path_to(f.body(fn), pos)):
            if part == "head" and stmt.head:
                head = f.code[stmt.head[0] : stmt.head[1]]
                kinds: set[str] = set()
                for call in re.finditer(r"([A-Za-z_]\w*)\s*\(", head):
                    name = call.group(1)
                    helper = self.sources.function(name) if name not in self.predicates else None
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
        if len(call_re(self.predicates).findall(body)) > 3:
            return None
        kinds = set(re.findall(rf"unary_op\s*\([^()]*\)\s*[!=]=\s*{prefix}(\w+)", body))
        return (kinds.pop(),) if len(kinds) == 1 else None

    # -- other shapes --

    def _scan_loop_matches(self, f: SourceFile) -> None:
        """A loop over a table of op lists that compares the nodes with each list by hand
        (`nodes[i + k]->op == ops[k]`): every row of the table is a fusion."""
        if "->op" not in f.code:
            return
        for m in _BY_HAND.finditer(f.code):
            fn = f.function_at(m.start())
            var = m.group("list")
            if fn is None or self.options.reorder.search(fn.name) or fn.param_index(var) is not None:
                continue  # a function comparing its parameter is a matcher: its callers are the sites
            try:
                rows = self.ev.loop_rows(f, fn, m.start(), var, None, var)
            except Unresolved as exc:
                self.reporter.unclassified(f, m.start(), str(exc))
                continue
            if rows is None:
                continue
            self.reporter.site_functions.add((f.path, fn.open))
            for v in rows:
                how = f"{v.how} matched by hand"
                self.reporter.emit(
                    v.file or f, v.pos or m.start(), v.ops, v.unary, how, snippet_pos=v.pos or m.start()
                )

    def _scan_other_calls(self, f: SourceFile) -> None:
        """Calls that look like fusion checks (`*can_fuse*(..., {GGML_OP_...})`) but are none of the
        predicates: said why, never guessed."""
        prefix = self.rule.op_prefix
        if "can_fuse" not in f.code:
            return
        for m in re.finditer(r"(?<![\w:])(\w*can_fuse\w*)\s*\(", f.code):
            name = m.group(1)
            fn = f.function_at(m.start())
            if name in self.predicates or fn is None or m.start() == fn.name_pos:
                continue
            args = call_args(f, m.end() - 1)
            if not any(prefix in text for text, _ in args):
                continue  # no op list written at the call: a helper checking something else
            found = self.sources.function(name)
            if found is None:
                why = f"{name}() is not defined in this backend or a shared file"
                self.reporter.unclassified(f, m.start(), why)
            elif _returns_false_first(*found):
                self.reporter.exclude(
                    f, m.start(), f"{name}() returns false before any check: it never fuses"
                )
            else:
                why = f"{name}() checks fusions without a fusion predicate the scanner reads"
                self.reporter.unclassified(f, m.start(), why)

    def _scan_pattern(self, f: SourceFile) -> None:
        assert self.rule.pattern is not None
        prefix = re.escape(self.rule.op_prefix)
        for m in self.rule.pattern.finditer(f.code):
            text = m.group("ops") if "ops" in self.rule.pattern.groupindex else m.group()
            ops = tuple(re.findall(rf"(?<!\w){prefix}(\w+)", text))
            if ops:
                self.reporter.emit(f, m.start(), ops, None, "config pattern", snippet_pos=m.start())

    def _scan_matchers(self, f: SourceFile) -> None:
        """Functions named like fusion matchers that compare node ops by hand: say so, don't guess."""
        prefix = re.escape(self.rule.op_prefix)
        if "fus" not in f.code.lower() or not re.search(r"nodes\s*\[", f.code):
            return
        for fn in f.functions:
            lowered = fn.name.lower()
            if "fus" not in lowered or fn.name in self.predicates or fn.name in self.reporter.table_functions:
                continue
            if (f.path, fn.open) in self.reporter.site_functions or self.options.reorder.search(fn.name):
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
                self.reporter.unclassified(
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
                        self.reporter.result.singles.append(
                            SingleOp(self.backend, m.group(1), f.path, f.line_of(m.start()))
                        )


def _returns_false_first(f: SourceFile, fn: Function) -> bool:
    body = f.body(fn)
    return (
        bool(body)
        and body[0].kind == "jump"
        and bool(re.fullmatch(r"return\s+(?:false|0)\s*;", f.code[body[0].start : body[0].end].strip()))
    )
