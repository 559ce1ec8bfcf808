"""Op lists built at run time (`ops[0] = op; ops.insert(ops.end(), {...}); std::fill(...)`),
simulated statement by statement along every branch up to the fusion check that reads them.

A state is one possible content of the list; branches fork states, `return` kills them, `break` and
`continue` stop them for the iteration; a loop runs twice (a list extended in a loop is a chain).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kb.inventory.csource import IDENT, INT, Function, SourceFile, Stmt, split_top
from kb.inventory.model import MAX_VARIANTS, Unresolved, Variant
from kb.inventory.sources import Definition


@dataclass
class State:
    elems: tuple[str | None, ...] = ()
    fill: str | None = None
    dead: bool = False
    stopped: bool = False


class Values(Protocol):
    """What the simulation asks of the evaluator (kb/inventory/evaluator.py) that owns it."""

    def values(
        self, f: SourceFile, fn: Function, pos: int, text: str, env: dict[str, object], depth: int = 0
    ) -> list[object]: ...

    def brace(
        self, f: SourceFile, fn: Function | None, pos: int, text: str, env: dict[str, object]
    ) -> list[tuple[str, ...]]: ...

    def cond(self, text: str, env: dict[str, object]) -> bool | None: ...


class Simulator:
    """Runs a function's statements on the possible contents of one list, up to the call that
    reads it; op values and conditions are read through the evaluator (`Values`)."""

    def __init__(self, ev: Values) -> None:
        self.ev = ev

    def simulate(
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
            if INT.match(t):
                count = int(re.sub(r"[uUlL]+$", "", t))
            elif IDENT.fullmatch(t):
                try:
                    vals = self.ev.values(f, fn, site, t, env)
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
            states = _dedupe(done + self._exec(f, fn, stmt, active, name, d, site, env, in_loop))
            _cap(states)
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
            cond = self.ev.cond(code[stmt.head[0] : stmt.head[1]], env)
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
            return _dedupe([*taken, *skipped])
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
                vals = self.ev.values(f, fn, stmt.start, args[1][0], env)
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
            lists = self.ev.brace(f, fn, pos, m.group(1), env)
            return _dedupe([State((*s.elems, *ops), s.fill) for s in states for ops in lists])
        m = re.fullmatch(rf"{n}\s*=\s*(\{{.*\}})", text, re.S)
        if m:
            lists = self.ev.brace(f, fn, pos, m.group(1), env)
            return _dedupe([State(tuple(ops), None) for s in states for ops in lists])
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
        values = [v for v in self.ev.values(f, fn, pos, expr, env) if isinstance(v, str)]
        if not values:
            raise Unresolved(f"{expr.strip()} is not an op")
        assert callable(apply)
        return _dedupe([apply(s, v) for s in states for v in values])


def _dedupe(states: list[State]) -> list[State]:
    seen: dict[tuple[object, ...], State] = {}
    for s in states:
        seen.setdefault((s.elems, s.fill, s.dead, s.stopped), s)
    return list(seen.values())


def _cap(states: list[State]) -> None:
    if len(states) > MAX_VARIANTS:
        raise Unresolved(f"more than {MAX_VARIANTS} op lists possible here")
