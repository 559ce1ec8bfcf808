"""`autoresearch analyze`: decide keep / discard / inconclusive offline from raw samples.

Two sample files (one number a line), or a JSON-lines batch of cases judged together with the
false discovery rate controlled across the batch. The rule is the runner's (`runner.stats`):
by default the pairs are read as one look of the runner's sequential plan, so the verdict is the
one the runner would give with that many pairs; `--single-look` treats them as a fixed-size
experiment analysed once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from kb.errors import UserError
from kb.files import read_text
from runner.harness.protocol import plain_number
from runner.stats import Case, Decision, Direction, Policy, decide_wave
from tui.cli.common import echo
from tui.cli.params import Number, PathArg, count

_BATCH_KEYS = {"id", "baseline", "candidate", "paired", "direction", "min_effect", "max_pairs"}


@click.command(name="analyze")
@click.option(
    "--baseline",
    "baseline_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Baseline samples: one number a line (blank lines ignored).",
)
@click.option(
    "--candidate",
    "candidate_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Candidate samples, same format.",
)
@click.option(
    "--batch",
    "batch_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help='JSON lines, one case a line: {"baseline": [...], "candidate": [...], "paired": true, '
    '"direction": "higher", "min_effect": 0.01, "id": ...}; FDR across the batch.',
)
@click.option(
    "--paired",
    is_flag=True,
    help="Line i of each file is one pair (measured back to back). Default: independent samples.",
)
@click.option(
    "--direction",
    type=click.Choice(["higher", "lower"]),
    default="higher",
    show_default=True,
    help="Which way is better: higher (throughput) or lower (time).",
)
@click.option(
    "--min-effect",
    type=Number(),
    default=0.01,
    show_default=True,
    help="Smallest relative improvement worth keeping (0.01 = 1%).",
)
@click.option("--alpha", type=Number(), default=0.05, show_default=True, help="Error rate (0.05: 95%).")
@click.option(
    "--max-pairs",
    type=count(),
    default=80,
    show_default=True,
    help="Cap on pairs: below it an undecided paired case says 'continue', at it 'inconclusive'.",
)
@click.option(
    "--single-look",
    is_flag=True,
    help="A fixed-size experiment analysed once: the whole alpha at this look, no 'continue'.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
def cli(
    baseline_path: Path | None,
    candidate_path: Path | None,
    batch_path: Path | None,
    paired: bool,
    direction: Direction,
    min_effect: float,
    alpha: float,
    max_pairs: int,
    single_look: bool,
    as_json: bool,
) -> None:
    """Decide keep / discard / inconclusive from raw samples of a baseline and a candidate.

    Effects are relative improvements (+3.0% = 3% better, whatever the direction), with an
    interval whose level is adjusted for the runner's repeated looks unless --single-look.
    Batch output is one JSON decision a line, in input order.
    """
    if batch_path is not None:
        if baseline_path is not None or candidate_path is not None:
            raise UserError("--batch: give either --batch or --baseline and --candidate, not both")
        cases, ids = _read_batch(batch_path, paired, direction, min_effect, alpha, max_pairs, single_look)
        decisions = decide_wave(cases, Policy(alpha=alpha, sequential=not single_look))
        for line, decision in decisions.items():
            record: dict[str, Any] = {"line": line}
            if line in ids:
                record["id"] = ids[line]
            record.update(decision.to_json())
            echo(json.dumps(record, allow_nan=False))
        return
    if baseline_path is None or candidate_path is None:
        raise UserError("analyze: give --baseline FILE and --candidate FILE, or --batch FILE.jsonl")
    baseline = read_numbers(baseline_path)
    candidate = read_numbers(candidate_path)
    if paired and len(baseline) != len(candidate):
        raise UserError(
            f"--paired: {baseline_path} has {len(baseline)} values but {candidate_path} has "
            f"{len(candidate)}; pairs need equal counts"
        )
    policy = _policy(alpha, min_effect, max_pairs, direction, single_look)
    case = Case(baseline, candidate, paired=paired)
    decision = decide_wave({"case": case}, policy)["case"]
    if as_json:
        echo(json.dumps({"paired": paired, **decision.to_json()}, allow_nan=False))
    else:
        echo(format_decision(decision, paired=paired))


def read_numbers(path: Path) -> list[float]:
    """Positive numbers (ASCII decimal), one a line; blank lines ignored; anything else names its line."""
    text = read_text(path).removeprefix("\ufeff")
    values: list[float] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token:
            continue
        value = plain_number(token)
        if value is None:
            raise UserError(f"{path}:{lineno}: not a number: {token[:40]!r}")
        if value <= 0:
            raise UserError(f"{path}:{lineno}: {token} is not a positive number")
        values.append(value)
    if not values:
        raise UserError(f"{path}: holds no numbers")
    return values


def format_decision(decision: Decision, *, paired: bool) -> str:
    """Two lines: the verdict with effect, interval, pairs and p; then the reason."""
    unit = "pairs" if paired else "samples (fewer side)"
    low = "-inf" if math.isinf(decision.ci_low) else f"{decision.ci_low:+.1%}"
    high = "+inf" if math.isinf(decision.ci_high) else f"{decision.ci_high:+.1%}"
    level = f"{100 * decision.level:.3g}%"
    noise = "" if decision.noise is None else f"  noise {decision.noise:.1%}"
    return (
        f"{decision.verdict.upper():<12} effect {decision.effect:+.1%}  {level} CI [{low}, {high}]"
        f"  {decision.pairs} {unit}  p {decision.p_value:.2g}{noise}\n"
        f"  {decision.reason}"
    )


def _policy(alpha: float, min_effect: float, max_pairs: int, direction: str, single_look: bool) -> Policy:
    if max_pairs < 3:
        raise UserError(f"--max-pairs {max_pairs}: must be at least 3")
    return Policy(
        alpha=alpha,
        min_effect=min_effect,
        max_pairs=max_pairs,
        min_pairs=min(Policy.min_pairs, max_pairs),
        direction="lower" if direction == "lower" else "higher",
        sequential=not single_look,
    )


def _read_batch(
    path: Path,
    paired: bool,
    direction: str,
    min_effect: float,
    alpha: float,
    max_pairs: int,
    single_look: bool,
) -> tuple[dict[int, Case], dict[int, Any]]:
    """Cases keyed by line number, and the ids the lines gave. CLI options are the defaults."""
    text = read_text(path)
    cases: dict[int, Case] = {}
    ids: dict[int, Any] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(raw, dict):
            raise UserError(f"{where}: a case must be a JSON object")
        unknown = sorted(set(raw) - _BATCH_KEYS)
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_BATCH_KEYS))})")
        baseline = _number_list(raw, "baseline", where)
        candidate = _number_list(raw, "candidate", where)
        case_paired = raw.get("paired", paired)
        if not isinstance(case_paired, bool):
            raise UserError(f"{where}: 'paired' must be true or false")
        if case_paired and len(baseline) != len(candidate):
            raise UserError(
                f"{where}: paired case has {len(baseline)} baseline but {len(candidate)} candidate values"
            )
        case_direction = raw.get("direction", direction)
        if case_direction not in ("higher", "lower"):
            raise UserError(f'{where}: \'direction\' must be "higher" or "lower"')
        case_min_effect = raw.get("min_effect", min_effect)
        if isinstance(case_min_effect, bool) or not isinstance(case_min_effect, int | float):
            raise UserError(f"{where}: 'min_effect' must be a number")
        case_max_pairs = raw.get("max_pairs", max_pairs)
        if isinstance(case_max_pairs, bool) or not isinstance(case_max_pairs, int):
            raise UserError(f"{where}: 'max_pairs' must be an integer")
        try:
            policy = _policy(alpha, float(case_min_effect), case_max_pairs, case_direction, single_look)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        cases[lineno] = Case(baseline, candidate, paired=case_paired, policy=policy)
        if "id" in raw:
            ids[lineno] = raw["id"]
    if not cases:
        raise UserError(f"{path}: holds no cases")
    return cases, ids


def _number_list(raw: dict[str, Any], key: str, where: str) -> list[float]:
    if key not in raw:
        raise UserError(f"{where}: missing {key!r}")
    values = raw[key]
    if not isinstance(values, list) or not values:
        raise UserError(f"{where}: {key!r} must be a non-empty list of numbers")
    out: list[float] = []
    for i, value in enumerate(values, 1):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UserError(f"{where}: {key} value #{i} is not a number: {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{where}: {key} value #{i} ({value}) is not a positive number")
        out.append(float(value))
    return out
