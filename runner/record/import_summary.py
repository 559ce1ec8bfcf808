"""What the import of a run says about it: pi-autoresearch's confidence for a segment next to a
paired test of the same comparison (stored in `runs.summary["import"]` by runner.record.importer),
and the lines `history` and the report print from that summary.
"""

from __future__ import annotations

from typing import Any

from runner import stats
from runner.record.logformats import PI_LIKELY, PI_MARGINAL, Segment, finite, pi_confidence, pi_label


def segment_comparison(segment: Segment, experiment_ids: list[int]) -> dict[str, Any]:
    """pi's confidence for the segment next to a paired test of the same comparison (best kept
    against the baseline), and whether the two agree."""
    metric, direction = segment.metric, segment.direction
    pi_values = [line.values.get(metric, 0.0) for line in segment.lines]
    score = pi_confidence(pi_values, [line.pi_status for line in segment.lines], direction)
    logged = segment.lines[-1].confidence
    baseline = segment.lines[0].values.get(metric)
    kept = [
        (line.values[metric], eid)
        for line, eid in list(zip(segment.lines, experiment_ids, strict=True))[1:]
        if line.status == "keep" and metric in line.values
    ]
    out: dict[str, Any] = {
        "pi_confidence": score,
        "pi_label": pi_label(score),
        "pi_logged": logged,
        "baseline": baseline,
        "best_kept": None,
        "best_experiment": None,
        "paired": None,
        "agree": None,
    }
    if not kept or baseline is None:
        out["paired_reason"] = "no kept value after the baseline, or no baseline value, to compare"
        return out
    best, best_id = (max if direction == "higher" else min)(kept, key=lambda x: x[0])
    out.update(best_kept=best, best_experiment=best_id)
    if baseline <= 0 or best <= 0:
        out["paired_reason"] = "values of 0 or below: no log ratio, so no paired test"
        return out
    side: stats.Direction = "higher" if direction == "higher" else "lower"
    decision = stats.decide_paired([baseline], [best], stats.Policy(direction=side), final=True)
    out["paired"] = {"verdict": decision.verdict, "effect": decision.effect, "pairs": decision.pairs}
    out["paired_reason"] = (
        f"one measurement of each side: a paired test needs at least {stats.MIN_VALUES} pairs"
        if decision.pairs < stats.MIN_VALUES
        else decision.reason
    )
    if score is not None:
        # They disagree when pi calls the gain likely real and the test does not keep it, or pi
        # calls it noise and the test keeps it.
        out["agree"] = not (
            (score >= PI_LIKELY and decision.verdict != "keep")
            or (score < PI_MARGINAL and decision.verdict == "keep")
        )
    return out


def summary_lines(run_summary: dict[str, Any] | None) -> list[str]:
    """What the import of a run read and how pi-autoresearch's confidence compares with a paired
    test, as lines for `history` and the report (empty for a run that was not imported)."""
    info = (run_summary or {}).get("import")
    if not isinstance(info, dict):
        return []
    where = f"config line {info['config_line']}" if info.get("config_line") else "no config line"
    segment, session = info.get("segment"), info.get("session")
    named = f" {session!r}" if session else ""
    lines, fmt = info.get("lines"), info.get("format")
    out = [f"Imported {lines} lines of a {fmt} log{named} (segment {segment}, {where})"]
    score, logged = info.get("pi_confidence"), info.get("pi_logged")
    if score is None:
        text = (
            "pi-autoresearch's confidence: not computable (it needs 3 values above 0 that vary, "
            "and a kept value other than the baseline)"
        )
    else:
        text = f"pi-autoresearch's confidence: {score:.2f}x its noise floor ({pi_label(score)})"
    if finite(logged):
        text += f"; the log's last line says {logged:.2f}x"
    out.append(text)
    best, baseline = info.get("best_kept"), info.get("baseline")
    paired = info.get("paired")
    if best is not None and baseline is not None:
        number = info.get("best_experiment")
        target = f"the best kept value ({best:g}, #{number}) against the baseline ({baseline:g})"
    else:
        target = "the best kept value against the baseline"
    verdict = paired.get("verdict") if isinstance(paired, dict) else None
    out.append(f"Paired test of {target}: {verdict or 'none'} ({info.get('paired_reason')})")
    agree = info.get("agree")
    if agree is False:
        out.append(
            f"They disagree: pi-autoresearch calls the gain {pi_label(score)}, the paired test "
            + ("keeps it" if verdict == "keep" else "cannot keep it")
        )
    elif agree is True:
        out.append("They agree")
    notes = info.get("notes") or {}
    if notes:
        out.append("Read as noted: " + "; ".join(f"{n} x {note}" for note, n in notes.items()))
    return out
