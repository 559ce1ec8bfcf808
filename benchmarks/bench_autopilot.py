"""The autopilot's own cost: how long its research phases take besides the model, and what a
measured experiment costs in model calls.

The loop of tests/runner/test_autopilot.py (real builds and benchmarks of the runner's small C
target on the local fleet; the model played by a scripted OpenAI-compatible server on 127.0.0.1
that answers at once, through litellm), run to its plateau stop. The server names itself after a
priced model and reports token counts estimated from the request (4 characters a token), so
litellm's price table turns the calls into dollars as it would for that model.

- research overhead: each phase's wall time (its research_started to research_done events) minus
  the time its model calls took (llm_calls.duration_ms). Goal: <= 1 s a phase.
- $ per experiment: the run's llm_calls.cost_usd over the candidate experiments that reached a
  benchmark.

    .venv/bin/python benchmarks/bench_autopilot.py [--model gpt-4o-mini] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from kb.db import rows  # noqa: E402
from tests.runner.autopilot_agent import Agent  # noqa: E402
from tests.runner.research_support import ScriptedLLM  # noqa: E402
from tests.runner.test_autopilot import autopilot_workspace, paper_passage, run_autopilot  # noqa: E402


def measure(model: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ScriptedLLM([], model=model) as llm:
        ws = autopilot_workspace(Path(tmp), llm)
        agent = Agent(paper_passage(ws))

        def priced(body: dict[str, Any]) -> dict[str, Any]:
            text = agent(body)
            prompt = sum(len(m["content"]) for m in body["messages"]) // 4
            usage = {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            return {"content": text, "usage": usage}

        llm.script = priced
        summary, _ = run_autopilot(ws)
        db = ws.db()
        events = rows(
            db,
            "SELECT kind, ts, data FROM events WHERE run_id = ? "
            "AND kind IN ('research_started', 'research_done') ORDER BY id",
            [summary.run_id],
        )
        phases = []
        started: float | None = None
        for e in events:
            if e["kind"] == "research_started":
                started = e["ts"]
                continue
            data = json.loads(e["data"])
            ids = data["call_ids"]
            model_s = 0.0
            if ids:
                marks = ", ".join("?" for _ in ids)
                found = rows(
                    db,
                    f"SELECT coalesce(sum(duration_ms), 0) AS ms FROM llm_calls WHERE id IN ({marks})",
                    ids,
                )
                model_s = found[0]["ms"] / 1000
            assert started is not None
            wall = e["ts"] - started
            phases.append(
                {"phase": data["phase"], "wall_s": wall, "model_s": model_s, "overhead_s": wall - model_s}
            )
        measured = rows(
            db,
            "SELECT count(*) AS n FROM experiments e WHERE run_id = ? AND kind = 'candidate' "
            "AND EXISTS (SELECT 1 FROM samples s WHERE s.experiment_id = e.id)",
            [summary.run_id],
        )[0]["n"]
        cost = rows(
            db,
            "SELECT coalesce(sum(cost_usd), 0) AS c, count(*) AS n FROM llm_calls WHERE run_id = ?",
            [summary.run_id],
        )[0]
        return {
            "model": model,
            "stop_reason": summary.stop_reason,
            "phases": phases,
            "max_overhead_s": max(p["overhead_s"] for p in phases),
            "experiments_measured": measured,
            "llm_calls": cost["n"],
            "llm_usd": cost["c"],
            "usd_per_experiment": cost["c"] / measured if measured else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt-4o-mini", help="A model litellm has a price for.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.model)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for p in result["phases"]:
        print(
            f"research phase {p['phase']}: {p['wall_s']:.2f} s wall, {p['model_s']:.2f} s in model calls, "
            f"{p['overhead_s']:.2f} s overhead"
        )
    print(f"largest overhead: {result['max_overhead_s']:.2f} s a phase (goal <= 1 s)")
    per = result["usd_per_experiment"]
    print(
        f"{result['llm_calls']} model calls, ${result['llm_usd']:.4f} ({args.model} prices) for "
        f"{result['experiments_measured']} measured experiments: "
        + (f"${per:.4f} per experiment" if per is not None else "no experiment measured")
        + f"; stopped: {result['stop_reason']}"
    )


if __name__ == "__main__":
    main()
