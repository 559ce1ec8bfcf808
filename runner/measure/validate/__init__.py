"""`autoresearch validate`: build, benchmark and checks tried on the baseline, with advice.

- `model`: the records: `Measurement` (steps, calls, samples) and `Report` (findings, figures).
- `fingerprint`: what a measurement depends on, and what changed since.
- `jobs`: `measure`: the baseline checked out, the template's two jobs run as the local fleet does.
- `judge`: `evaluate`: per-metric figures, problems and advice under the current settings.
- `parsing`: the parse cross-check of a scaffolded benchmark's regex.
- `advice`: noise, parallelism and timeout advice with numbers.
- `store`: validation.json (`save`, `load`) and the `gate` a run checks before it starts.

    measurement = measure(ws, calls=4, progress=print)   # runs the template's jobs on the baseline
    report = evaluate(measurement, ws.settings)           # problems and advice, with numbers
    save(ws, measurement, report)                         # validation.json in the workspace
    gate(ws, parallel=None, backend=None)                 # what `run` checks before it starts

The baseline is checked out once (runner/harness/prepare.py, the scripts placed as in every experiment),
and the experiment template runs exactly as the local fleet runs it, in two jobs like a run's
batches: the first builds the tree and runs the checks (no pairs), the second runs the benchmark
in pairs (A B, B A) with the builds cached; both sides are the same tree. So what validate sees is
what the A/A self-test will see, minus a second build.

The measurement (what ran, every sample with the line it came from, durations, CPU time) is stored
with a fingerprint of what it depends on: the baseline, the build command, the environment, the
scripts and the template. `run` refuses to start when the fingerprint no longer matches (validate
again) or when the stored measurement, judged under the *current* settings, has problems: so
raising `policy.min_effect` or lowering `fleet.parallel` needs no new measurement.
"""

from __future__ import annotations

from runner.measure.validate.advice import KEEP_POWER, SHORT_CALL_SECONDS
from runner.measure.validate.fingerprint import changed, fingerprint, inputs_of
from runner.measure.validate.jobs import DEFAULT_CALLS, EXPERIMENT_ID, Progress, measure
from runner.measure.validate.judge import RESEARCH_METRICS, evaluate
from runner.measure.validate.model import (
    Call,
    Finding,
    Measurement,
    MetricFigures,
    Report,
    Sample,
    StepResult,
)
from runner.measure.validate.parsing import parse_doubts
from runner.measure.validate.store import VALIDATION_FILE, VERSION, Gate, gate, load, path_of, save

__all__ = [
    "DEFAULT_CALLS",
    "EXPERIMENT_ID",
    "KEEP_POWER",
    "RESEARCH_METRICS",
    "SHORT_CALL_SECONDS",
    "VALIDATION_FILE",
    "VERSION",
    "Call",
    "Finding",
    "Gate",
    "Measurement",
    "MetricFigures",
    "Progress",
    "Report",
    "Sample",
    "StepResult",
    "changed",
    "evaluate",
    "fingerprint",
    "gate",
    "inputs_of",
    "load",
    "measure",
    "parse_doubts",
    "path_of",
    "save",
]
