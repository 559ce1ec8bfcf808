"""Reflection between waves: a short post-mortem stored in the KB and read by the next research phase.

After a wave, the facts (each experiment's decision, effect, interval, pairs, noise; crashes and
refusals; the run's noise floor) are summarised. With a model configured, the model turns them into a
post-mortem: what worked, what was noise, what to try next. Without one (or if the call fails) the
plain summary is stored instead. Either way it becomes a `note` source with one `note` evidence row
(so research can search and cite it) linked from `waves.reflection_evidence_id`. Reflecting on the
same wave again replaces the note in place (same evidence id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import sqlite_utils
from pydantic import BaseModel, Field

from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import research as store
from kb.store import waves
from kb.store.research import WaveOutcome, WaveWithRun
from runner.stats import pct

if TYPE_CHECKING:
    from kb.workspace import Workspace
    from runner.llm import LLMClient


# Bounded lists and strings: a grammar-constrained server cannot loop (see runner.research.generate).
Point = Annotated[str, Field(max_length=600)]


class Reflection(BaseModel):
    worked: list[Point] = Field(max_length=10, description="What produced real, significant gains, and why.")
    noise: list[Point] = Field(
        max_length=10, description="What was noise or inconclusive, and what that says about the path."
    )
    next: list[Point] = Field(
        max_length=10, description="What to try next (or stop trying), most promising first."
    )
    summary: str = Field(max_length=1500, description="Two or three sentences for the next research phase.")


class WaveFacts(TypedDict):
    """A wave (with its run's name, noise floor and policy) and its experiments' outcomes."""

    wave: WaveWithRun
    experiments: list[WaveOutcome]


def wave_facts(db: sqlite_utils.Database, wave_id: int) -> tuple[WaveFacts, str]:
    """The wave's experiments and decisions, and a plain-text summary of them."""
    wave = store.wave_with_run(db, wave_id)
    if wave is None:
        raise UserError(f"wave {wave_id}: no such wave")
    experiments = store.wave_outcomes(db, wave_id)
    groups: dict[str, list[str]] = {}
    noises: list[float] = []
    for e in experiments:
        name = f"#{e['id']} {e['hypothesis'] or e['title']}"
        if e["noise"] is not None:
            noises.append(float(e["noise"]))
        if e["verdict"] is not None and e["status"] in ("kept", "discarded", "inconclusive"):
            line = (
                f"{name}: {e['metric']} {pct(e['effect'])} [{pct(e['ci_low'])}, {pct(e['ci_high'])}] "
                f"over {e['pairs']} pairs" + (f", noise {e['noise']:.1%}" if e["noise"] is not None else "")
            )
        else:
            line = f"{name}" + (f" ({e['reason']})" if e["reason"] else "")
        groups.setdefault(e["status"], []).append(line)
    labels = {
        "kept": "Kept",
        "discarded": "Discarded",
        "inconclusive": "Inconclusive (within noise)",
        "checks_failed": "Checks failed",
        "crashed": "Crashed",
        "conflict": "Conflict (no longer applies after a winner; waits for a port)",
        "refused": "Refused (protected path)",
        "cancelled": "Cancelled",
        "lost": "Lost (worker lost)",
        "queued": "Not run",
        "running": "Still running",
    }
    lines = [
        f"Wave {wave['number']} of run {wave['run_name']} (baseline {str(wave['baseline_commit'])[:12]}): "
        f"{len(experiments)} experiment(s)."
    ]
    for status, label in labels.items():
        if status in groups:
            lines.append(f"{label}:")
            lines.extend(f"- {line}" for line in groups[status])
    floor = wave["noise_floor"]
    noise_line = f"Noise: run noise floor {floor:.1%}" if floor is not None else "Noise: no A/A noise floor"
    if noises:
        noise_line += f"; per-experiment noise {min(noises):.1%} to {max(noises):.1%}"
    lines.append(noise_line + ".")
    facts: WaveFacts = {"wave": wave.copy(), "experiments": experiments}
    return facts, "\n".join(lines)


def _store(
    db: sqlite_utils.Database,
    wave: WaveWithRun,
    body: str,
    meta: dict[str, Any],
) -> int:
    url = f"autoresearch://run/{wave['run_id']}/wave/{wave['number']}/reflection"
    title = f"Reflection on wave {wave['number']} of run {wave['run_name']}"
    stamp = now()
    with transaction(db):
        evidence_id = store.store_note(db, url, f"wave:{wave['id']}", title, body, meta, stamp)
        waves.update(db, wave["id"], {"reflection_evidence_id": evidence_id})
        log_event(
            db, "wave.reflection", f"{title}: note {evidence_id} ({meta['author']})", run_id=wave["run_id"]
        )
    return evidence_id


def _render(answer: Reflection, summary: str) -> str:
    def section(label: str, items: list[str]) -> list[str]:
        return [f"{label}:", *(f"- {item}" for item in items)] if items else [f"{label}: (none)"]

    return "\n".join(
        [
            answer.summary.strip(),
            "",
            *section("What worked", answer.worked),
            *section("What was noise", answer.noise),
            *section("What to try next", answer.next),
            "",
            "Facts:",
            summary,
        ]
    )


def reflect_on_wave(
    ws: Workspace,
    db: sqlite_utils.Database,
    wave_id: int,
    *,
    client: LLMClient | None = None,
    use_model: bool = True,
    model: str | None = None,
    api_base: str | None = None,
) -> int:
    """Write the wave's post-mortem as a KB note and return its evidence id.

    Uses `client`, else a client for `llm.model` when one is configured, else (or when the model call
    fails or the budget is spent) stores the plain summary. Never raises for model trouble: the run
    loop calls this after every wave. An unknown wave is a UserError."""
    facts, summary = wave_facts(db, wave_id)
    wave = facts["wave"]
    if client is None and use_model and (model or ws.settings.llm.model):
        from runner.llm import client_for

        client = client_for(db, ws.settings.llm, model=model, api_base=api_base, run_id=wave["run_id"])
    if client is None or not use_model:
        return _store(db, wave, summary, {"author": "summary", "run_id": wave["run_id"], "wave_id": wave_id})
    from runner.llm import LLMError

    messages = [
        {
            "role": "system",
            "content": "You are the performance engineer running this experiment loop. Write a short, "
            "honest post-mortem of the wave from the facts given: effects whose interval crosses zero "
            "or that are below the noise floor are noise, not wins. Say what the results imply about "
            "the bottleneck and what the next research phase should look for or avoid.",
        },
        {"role": "user", "content": f"Facts of the wave (measured by the runner):\n{summary}"},
    ]
    try:
        # One post-mortem a wave: a run resumed after a kill here reuses the stored answer.
        result = client.complete_structured(
            "reflect", messages, Reflection, step=f"run{wave['run_id']}:reflect:w{wave_id}"
        )
    except LLMError as exc:
        body = f"{summary}\n\n(model post-mortem unavailable: {exc})"
        return _store(
            db,
            wave,
            body,
            {"author": "summary", "run_id": wave["run_id"], "wave_id": wave_id, "error": str(exc)},
        )
    return _store(
        db,
        wave,
        _render(result.value, summary),
        {
            "author": client.config.model,
            "llm_call_id": result.call_id,
            "run_id": wave["run_id"],
            "wave_id": wave_id,
        },
    )
