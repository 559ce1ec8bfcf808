"""The fusion predicates of one backend: the calls a project names (ggml's `ggml_can_fuse` and its
relatives by default), the helper functions that forward one of their parameters to a predicate
(wrappers of wrappers too, wherever in the backend or the shared files they are defined), and the
functions that compare a parameter list against `node->op` element by element (matchers); and,
for a call of one, which arguments hold its op list, its count and its start index."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kb.inventory.csource import INT, Function, SourceFile, match_forward, split_top
from kb.inventory.evaluator import plain_name, unwrap
from kb.inventory.model import GGML_CALLS

_INDEXED_OP_COMPARE = re.compile(
    r"->\s*op\s*[!=]=\s*\w+\s*(?:\.\s*begin\s*\(\s*\)\s*)?\[|\]\s*[!=]=\s*[\w\[\]\->.+ ]*->\s*op\b"
)


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


def find_predicates(calls: Sequence[str], files: Sequence[SourceFile]) -> dict[str, Predicate]:
    """The configured calls, then the matchers and wrappers defined in `files`, by name."""
    predicates: dict[str, Predicate] = {}
    for name in calls:
        predicates[name] = Predicate(name, None)
    for f in files:
        if _INDEXED_OP_COMPARE.search(f.code):
            for fn in f.functions:
                _maybe_matcher(predicates, f, fn)
    changed = True
    while changed:
        changed = False
        pattern = call_re(predicates)
        for f in files:
            if not any(n in f.code for n in predicates):
                continue
            for m in pattern.finditer(f.code):
                owner = f.function_at(m.start())
                if owner is None or owner.name in predicates or not owner.params:
                    continue
                args = call_args(f, m.end() - 1)
                pred = predicates[m.group(1)]
                ops_i, _, index_i = positions(pred, args)
                if ops_i is None or ops_i >= len(args):
                    continue
                ident = plain_name(args[ops_i][0])
                param = owner.param_index(ident) if ident else None
                if param is None:
                    continue
                index_param = None
                if index_i is not None and index_i < len(args):
                    index_param = owner.param_index(args[index_i][0].strip())
                predicates[owner.name] = Predicate(
                    owner.name, param, index_param, None, how=f"helper {owner.name}"
                )
                changed = True
    return predicates


def _maybe_matcher(predicates: dict[str, Predicate], f: SourceFile, fn: Function) -> None:
    """A function comparing `node->op` with the elements of one of its list parameters."""
    if fn.name in predicates or not fn.param_text.strip():
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
            predicates[fn.name] = Predicate(fn.name, i, index, None, how=f"matcher {fn.name}")
            return


def call_re(predicates: dict[str, Predicate]) -> re.Pattern[str]:
    """Calls of the predicates; a wrapper may be a method (`ctx->can_fuse(i, {...})`)."""
    names = sorted(predicates, key=len, reverse=True)
    return re.compile(r"(?<![\w:])(" + "|".join(re.escape(n) for n in names) + r")\s*\(")


def call_args(f: SourceFile, open_paren: int) -> list[tuple[str, int]]:
    """The arguments of the call whose `(` is at `open_paren`, each with its position."""
    close = match_forward(f.code, open_paren)
    return [(t, open_paren + 1 + off) for t, off in split_top(f.code[open_paren + 1 : close])]


def positions(pred: Predicate, args: list[tuple[str, int]]) -> tuple[int | None, int | None, int | None]:
    """(ops, count, index) argument positions for a call of `pred` with these arguments."""
    if pred.name in GGML_CALLS and pred.ops_arg is None:
        return _core_predicate(pred.name, len(args))
    if pred.ops_arg is not None:
        return pred.ops_arg, pred.count_arg, pred.index_arg
    # A configured call: the first brace list (or compound literal), else the third argument.
    chosen = next((i for i, (t, _) in enumerate(args) if i >= 1 and unwrap(t).startswith("{")), None)
    if chosen is None and len(args) > 2:
        chosen = 2
    if chosen is None:
        return None, None, None
    count = chosen + 1 if chosen + 1 < len(args) and INT.match(args[chosen + 1][0]) else None
    return chosen, count, chosen - 1 if chosen >= 1 else None
