"""Read the logs other autoresearch loops write: pi-autoresearch's `autoresearch.jsonl` (or
`.auto/log.jsonl`) and karpathy/autoresearch's `results.tsv`, into segments of lines (no database).
The readers are runner.record.pi_jsonl and runner.record.results_tsv; their shared types and the
status words are in runner.record.logtypes. This module states the rules and picks the reader.

**jsonl** (pi-autoresearch, the SkyPilot example). One JSON object per line, read as
pi-autoresearch's own reader (extensions/pi-autoresearch/jsonl.ts) reads it:

- a config line (`"type": "config"`: `name`, `metricName`, `metricUnit`, `bestDirection`) starts a
  segment; a field it leaves out keeps the previous config's value, except `bestDirection`, which
  falls back to pi's default `lower` (so do run lines before any config line, metric `metric`); an
  empty `metricUnit` (pi writes `""`) is no unit; monotykamary/pi-autoresearch's snake_case keys
  (`metric_name`, `metric_unit`, `direction`) are read where pi's are missing;
- hook lines (`"type": "hook"`, written whenever hooks are configured) and fan92rus/pi-autoresearch's
  `"type": "finalize"` line are skipped, as pi skips them;
- every other line with a `run` number (or, without one, a `metric` or `status`) is a run line:
  `commit`, `metric`, `metrics`, `status`, `description`, `timestamp`, `confidence`, `asi`,
  `literature_source`, `segment`. A missing or unknown status reads as keep (pi's reading; statuses
  are compared case-insensitively here, pi reads `Discard` as keep); the words other loops write
  for one of the four are read as they mean it (`budget_exceeded` is a crash; a fork's `explore`
  step is skipped: logtypes.STATUS_WORDS), and `--status WORD=STATUS` says what any word means. A
  `metric` or `metrics` entry that is not a finite number (`null`, `"12 t/s"`) is kept in the
  record but is no sample (pi reads a missing metric as 0; a measurement of 0 it is not). Metric
  names are stored as written (`p50-ms`, `tok/s`): the `[\\w.µ]` rule is for benchmark output only.
  Lines are split on `\\n` only (a description may hold U+2028), and a UTF-8 byte-order mark is
  dropped.

**tsv** (karpathy/autoresearch's program.md): a header `commit val_bpb memory_gb status description`,
tab-separated, in any order, then one row per experiment; status `keep`, `discard` or `crash` (any
case; also `checks_failed`, the words of logtypes.STATUS_WORDS and those `--status` names). Lines
starting with `#` are comments (`# metric_direction: higher_is_better` says the direction); a header
or a row may end in a tab. Every column but commit, status, description, a row label (`iteration`,
`experiment_id`, `phase`, ...) and a time column (`timestamp`: each row's time) holding numbers on
at least half of the rows that give it a value (`-`, `NA` give none) is a metric; the first is the
primary one (`metric=` picks another). Which way is better: `direction=`, else the `#
metric_direction` comment, else the way the log's keeps moved the primary metric, else lower
(val_bpb). One segment. Values are ASCII decimal numbers (runner.harness.protocol.plain_number);
anything else in a cell is no value.

Malformed lines (not JSON, not an object, a field of the wrong type, a line that is neither a
config, a hook nor a run line, a TSV row with an unknown status or the wrong number of columns) are
listed in `ParsedLog.skipped`; `parse` raises on the first unless `lenient`.

`pi_confidence` is pi-autoresearch's confidence score, as its computeConfidence defines it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from kb.errors import UserError
from kb.files import read_text
from runner.record.logtypes import FORMATS as FORMATS
from runner.record.logtypes import STATUS_MAP as STATUS_MAP
from runner.record.logtypes import Format as Format
from runner.record.logtypes import LogLine as LogLine
from runner.record.logtypes import ParsedLog as ParsedLog
from runner.record.logtypes import Segment as Segment
from runner.record.logtypes import Skipped as Skipped
from runner.record.logtypes import cap as cap
from runner.record.logtypes import fail, status_overrides, strip_bom
from runner.record.logtypes import finite as finite
from runner.record.pi_jsonl import parse_jsonl
from runner.record.results_tsv import parse_tsv

#: pi-autoresearch's labels for its confidence score (index.ts).
PI_LIKELY, PI_MARGINAL = 2.0, 1.0


# --- pi-autoresearch's confidence score -------------------------------------------------------------


def pi_label(score: float | None) -> str:
    """pi-autoresearch's words for its score (>= 2: likely real, >= 1: marginal, else within noise)."""
    if score is None:
        return "not computable"
    if score >= PI_LIKELY:
        return "likely real"
    return "marginal" if score >= PI_MARGINAL else "within noise"


def pi_confidence(values: Sequence[float], statuses: Sequence[str], direction: str) -> float | None:
    """pi-autoresearch's confidence for one segment, as its computeConfidence (index.ts) defines it.

    `values` are the segment's primary values in log order (0 where pi reads none), `statuses` its
    statuses as pi reads them. The noise floor is the median absolute deviation (MAD) of the values
    above 0; the score is |best kept − baseline| / MAD, where the baseline is the segment's first
    value and the best kept the best value above 0 of a keep line. None with fewer than 3 values
    above 0, a MAD of 0, no keep, or a best kept equal to the baseline.
    """
    if not values:
        return None
    positive = [(v, s) for v, s in zip(values, statuses, strict=True) if v > 0]
    if len(positive) < 3:
        return None
    centre = statistics.median(v for v, _ in positive)
    mad = statistics.median(abs(v - centre) for v, _ in positive)
    if mad == 0:
        return None
    kept = [v for v, s in positive if s == "keep"]
    if not kept:
        return None
    best = max(kept) if direction == "higher" else min(kept)
    baseline = values[0]
    if best == baseline:
        return None
    return abs(best - baseline) / mad


# --- reading the log ---------------------------------------------------------------------------------


def detect_format(path: Path, text: str) -> Format:
    """tsv for a `.tsv` file or a first line that is a tab-separated header (or a `#` comment above
    one); jsonl otherwise."""
    if path.suffix.lower() == ".tsv":
        return "tsv"
    lines = [line for line in text.split("\n") if line.strip()]
    first = next((line for line in lines if not line.lstrip().startswith("#")), "")
    return "tsv" if "\t" in first and not first.lstrip().startswith(("{", "[")) else "jsonl"


def parse(
    path: Path,
    *,
    fmt: str = "auto",
    lenient: bool = False,
    metric: str | None = None,
    direction: str | None = None,
    statuses: Mapping[str, str] | None = None,
) -> ParsedLog:
    """Read and check the whole log (no database access). Raises UserError on the first malformed
    line unless `lenient`, which skips malformed lines and lists them. `statuses` maps status words
    to keep, discard, crash, checks_failed or skip (`--status`)."""
    if fmt not in FORMATS:
        raise UserError(f"format {fmt!r}: must be one of {', '.join(FORMATS)}")
    if direction is not None and direction not in ("higher", "lower"):
        raise UserError(f"direction {direction!r}: must be 'higher' or 'lower'")
    words = status_overrides(statuses)
    text = strip_bom(read_text(path))
    kind: Format = detect_format(path, text) if fmt == "auto" else ("tsv" if fmt == "tsv" else "jsonl")
    if kind == "jsonl" and (metric is not None or direction is not None):
        raise UserError(
            f"{path}: --metric and --direction are for a results.tsv; a jsonl log's config lines say them"
        )
    log = parse_tsv(path, text, metric, direction, words) if kind == "tsv" else parse_jsonl(path, text, words)
    if log.skipped and not lenient:
        first = log.skipped[0]
        raise fail(path, first.line, first.reason, len(log.skipped))
    log.segments = [s for s in log.segments if s.lines]
    if not log.segments:
        raise UserError(f"{path}: no run lines; nothing imported")
    return log
