"""A scripted agent for the autopilot's end-to-end tests: an OpenAI-compatible server on 127.0.0.1
(tests/runner/research_support.ScriptedLLM) whose answers depend on what the loop asks, as a model's
would, across the waves of one run on the runner's small C target (tests/runner/runner_target.py):

- research phase 1: a SIMD micro-tuning of the hash loop (really a slowdown: discarded in wave 1);
- the post-mortem of wave 1: memory-bound, stop micro-tuning compute, cut memory traffic;
- research phase 2 (reading that post-mortem): fuse the warm-up pass into the measured work,
  citing a paper passage (kept: the winner); halve the warm-up (kept in the same wave, but on the
  line the winner changed: a conflict, then ported); tile the loop, whose first patch does not
  compile (repaired from the compiler's error);
- research phase 3: the SIMD idea again, once marked as a repeat by the model and once under a new
  title whose patch makes the same change (the novelty check catches it);
- then nothing new: the port and the repair are no gains, and the loop stops on its plateau.

Every answer is derived from the request (the hypothesis named in it, the results table, whether
a repair or port is asked), never from a call counter, so a resumed run gets the same answers."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from tests.runner.runner_target import PROG

SIMD = "Vectorise the hash loop with SIMD intrinsics"
FUSE = "Fuse the warm-up pass into the measured work"
HALVE = "Halve the warm-up pass"
TILE = "Tile the hash loop for cache reuse"
UNROLL = "Unroll the hash loop by four"

# The winner (the fusion) removes the warm-up: the tree later patches are written against.
WINNER_TREE = PROG.replace("    return 9 * n_iter;\n", "    return 0;\n")


def diff(before: str, old: str, new: str) -> str:
    """A `git diff`-style patch of prog.c replacing `old` by `new` (exactly once)."""
    assert before.count(old) == 1, old
    after = before.replace(old, new)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), "a/prog.c", "b/prog.c", n=3
    )
    return "".join(lines)


REPS = "static int reps(void) {\n    return 3;\n"
PATCHES = {
    # 3 -> 12 repetitions: the "SIMD" change makes the work much slower (discarded).
    SIMD: diff(PROG, REPS, "static int reps(void) {\n    return 12;\n"),
    # No warm-up pass at all: 4x less work (kept).
    FUSE: diff(PROG, "    return 9 * n_iter;\n", "    return 0;\n"),
    # Written against the original baseline, on the line the winner changes: a conflict after it.
    # (9 -> 3 passes: twice as fast, clearly kept, and clearly less than the fusion's 4x.)
    HALVE: diff(PROG, "    return 9 * n_iter;\n", "    return 3 * n_iter;\n"),
    # The port onto the winner's tree: there is no warm-up left to halve; a comment says so.
    "halve-port": diff(
        WINNER_TREE,
        "static unsigned long warmup_iters(void) {\n",
        "/* No warm-up left. */\nstatic unsigned long warmup_iters(void) {\n",
    ),
    # The tiling's first attempt does not compile; its repair is a harmless comment.
    "tile-broken": diff(PROG, REPS, "static int reps(void) {\n    int tile = ;\n    return 3;\n"),
    # (away from the warm-up, so it applies with or without the winner)
    TILE: diff(WINNER_TREE, "int main(void) {\n", "/* Tiled: one pass per tile. */\nint main(void) {\n"),
    # The same change as SIMD's patch (against the winner's tree, so it applies), another title.
    UNROLL: diff(WINNER_TREE, REPS, "static int reps(void) {\n    return 12;\n"),
}


def _hypothesis(title: str, rationale: str, evidence: int, effect: float, **extra: Any) -> dict[str, Any]:
    return {
        "title": title,
        "rationale": rationale,
        "expected_effect": effect,
        "risk": "low",
        "confidence": 0.6,
        "cost": 1.0,
        "evidence_ids": [evidence],
        **extra,
    }


def _existing(user: str) -> dict[str, int]:
    """Title -> id from the prompt's list of existing hypotheses (`#12 [status] title`)."""
    return {m.group(2).strip(): int(m.group(1)) for m in re.finditer(r"#(\d+) \[[a-z_]+\] (.+)", user)}


class Agent:
    """The model: `answer(request body)` -> the assistant's text."""

    def __init__(self, passage_id: int) -> None:
        self.passage = passage_id
        self.calls: dict[str, int] = {}

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        system = messages[0]["content"]
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        kind, text = self._answer(system, user)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        return text

    def _answer(self, system: str, user: str) -> tuple[str, str]:
        if "post-mortem" in system:
            return "reflect", self._reflect(user)
        if "writing one patch" in system:
            return "patch", self._patch(user)
        if "short full-text search queries" in user:
            return "queries", json.dumps({"queries": ["warm-up fusion memory traffic"]})
        return "research", self._research(user)

    def _reflect(self, user: str) -> str:
        if SIMD in user and "Discarded" in user:
            summary = (
                "The SIMD micro-tuning made no gain: the loop is bound by memory bandwidth, not by "
                "arithmetic. Stop micro-tuning compute; cut memory traffic instead (fuse passes)."
            )
        else:
            summary = "Keep cutting memory traffic; the fusion paid off."
        return json.dumps({"worked": [], "noise": [], "next": ["reduce memory traffic"], "summary": summary})

    def _research(self, user: str) -> str:
        existing = _existing(user)
        if "nothing measured yet" in user:
            found = [
                _hypothesis(
                    SIMD, "Use wider vector instructions for the hash chain loop body.", self.passage, 0.1
                )
            ]
        elif FUSE not in existing and "memory bandwidth" in user:  # the post-mortem was read
            found = [
                _hypothesis(
                    FUSE,
                    "The paper shows the warm-up pass re-reads the same data: fuse it away to cut traffic.",
                    self.passage,
                    0.6,
                ),
                _hypothesis(
                    HALVE, "Half the warm-up passes, half the memory traffic of that pass.", self.passage, 0.3
                ),
                _hypothesis(
                    TILE, "Tiling keeps the hash state in cache across repetitions.", self.passage, 0.1
                ),
            ]
        elif FUSE in existing and UNROLL not in existing:
            found = [
                _hypothesis(
                    SIMD + " again", "Retry the wider vectors.", self.passage, 0.1, repeat_of=existing[SIMD]
                ),
                _hypothesis(UNROLL, "Unrolling the loop four times cuts loop overhead.", self.passage, 0.05),
            ]
        else:
            found = []
        return json.dumps({"hypotheses": found})

    def _patch(self, user: str) -> str:
        title = re.search(r"Hypothesis \d+: (.+)", user)
        assert title is not None, user[:300]
        name = title.group(1).strip()
        if name == TILE:
            key = TILE if "did not build" in user else "tile-broken"
        elif name == HALVE:
            key = "halve-port" if "Rebase it" in user else HALVE
        else:
            key = name
        return json.dumps({"summary": f"patch for {name}", "diff": PATCHES[key]})
