"""The records of a validation: what ran on the baseline (`Measurement`, its steps, calls and
samples) and what judging it found (`Report`, its findings and per-metric figures), both stored in
validation.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Sample:
    metric: str
    value: float
    line: str
    """The METRIC line as printed."""
    source: str | None
    """For scaffolded scripts: the command's own output line the regex matched."""


@dataclass
class Call:
    """One benchmark invocation."""

    pair: int
    side: str
    rc: int
    seconds: float | None
    samples: list[Sample] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    """Malformed METRIC lines, with the reason."""
    tail: list[str] = field(default_factory=list)
    """Its last output lines (kept when it failed)."""
    profile: dict[str, float] = field(default_factory=dict)
    """Its PROFILE lines: symbol -> share of the call's time (optional; runner/profile.py)."""


@dataclass
class StepResult:
    name: str
    rc: int | None
    seconds: float | None
    tail: list[str] = field(default_factory=list)


@dataclass
class Measurement:
    fingerprint: str
    inputs: dict[str, Any]
    baseline_commit: str
    created_at: float
    calls_asked: int
    log_dir: str
    status: str
    """`done`, or `failed` with `reason` (setup, build, checks, benchmark, timeout)."""
    reason: str | None = None
    steps: list[StepResult] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    bench_cpu_seconds: float | None = None
    """CPU time of the benchmark job (its processes, all cores): / wall time = cores busy."""
    bench_wall_seconds: float | None = None
    scaffold: dict[str, Any] | None = None
    """The scaffolded benchmark's command, regex, metric and samples (None: a hand-written script)."""
    no_checks: bool = False
    accepted_parse: bool = False
    """The user looked at the matched lines and accepted them (`validate --accept-parse`)."""
    cores: int = 1
    isolation: str | None = None
    """What the harness ran the steps under (uid+pid+mount, userns+pid+mount, none)."""
    hidden_tools: list[dict[str, Any]] = field(default_factory=list)
    """Programs the commands name that this shell finds in a folder the sandbox hides from the
    steps (validate/hidden.py `HiddenTool`, as dicts)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        raw = dict(data)
        raw["steps"] = [StepResult(**s) for s in raw.get("steps", [])]
        raw["calls"] = [
            Call(**{**c, "samples": [Sample(**s) for s in c.get("samples", [])]})
            for c in raw.get("calls", [])
        ]
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Finding:
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class MetricFigures:
    name: str
    primary: bool
    values: list[float]
    per_call: list[float]
    samples_per_call: float
    sample_noise: float | None
    """Per-sample coefficient of variation within a call (pooled over the calls)."""
    call_noise: float | None
    """Coefficient of variation of the calls' medians (what one side of a pair varies by)."""
    pair_sd: float | None
    """Estimated spread of a pair's log ratio: sqrt(2) x the calls' spread on the log scale."""
    floor: float | None = None
    keepable: float | None = None
    pairs_for_min_effect: int | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    passed: bool
    problems: list[Finding]
    advice: list[Finding]
    metrics: list[MetricFigures]
    call_seconds: float | None
    cores_busy: float | None
    parallel: int
    backend: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
