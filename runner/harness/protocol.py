"""The experiment protocol as the runner reads it: METRIC lines and the job log's markers.

`autoresearch.sh` prints `METRIC <name>=<number>`. Parsing is strict: the name is `[\\w.µ]+`, the
value a finite decimal number and nothing else. `nan`, `inf`, `12 t/s` or an empty value are
rejected (the caller logs a warning event), never read as 0. A line is a metric attempt when it
starts with `METRIC` and whitespace; anything else on stdout is log.

Optionally `autoresearch.sh` also prints `PROFILE <symbol>=<share>`: the share (a fraction, 0-1) of
the benchmark's time spent in a function, from a profiler (`perf report`). They are no samples: they
are recorded with the baseline (runner/profile.py) and rank the hypotheses that touch hot functions.

A job runs the rendered `run` of runner/harness/experiment.yaml, which prints markers
`@@AR <nonce> <time> <KIND> ...` around every step, and runs every step through the harness
(runner/harness/harness.sh). `LogParser` turns the job log into phases, per-invocation samples, the
isolation the job ran under and the final status. Samples are authenticated three ways:

- the markers are printed by the harness only, between steps: a step's output reaches the log
  through the harness, which escapes any line of it that starts like a marker (`@@AR!`), and no step
  holds the log's descriptor; in a sandbox no step can reach the log file, the database, the job's
  files or its ancestors' environments either;
- only markers carrying the job's nonce count (the nonce is withheld from every step), and only
  METRIC lines between the BEGIN and END markers of one benchmark invocation are samples of that
  (pair, side);
- the markers must tell one consistent story: a BEGIN or END seen twice for a (pair, side), an END
  without its BEGIN, a pair outside the batch's range or more invocations than it asked for is a
  forgery (`state.violation`): the experiment is refused, never judged on the first sample seen.

The kinds: PHASE, SANDBOX <isolation> [why], BUILD_BEGIN/BUILD_END, CHECKS_BEGIN/CHECKS_END,
BEGIN/END <pair> <side>, TAMPERED <step> <side> <path> (a protected path differs from the baseline's
after that step) and STATUS <done|failed> [reason]. The time between a BEGIN and its END is the
harness's own clock of that invocation (`harness.wall_s`, recorded by the runner).

What a step prints is bounded, so that a candidate flooding its output cannot exhaust the runner:
a line longer than MAX_LINE_BYTES is read as several lines (the harness folds them the same way
before it escapes them), and one invocation gives at most MAX_SAMPLES samples, MAX_REJECTED
rejected METRIC lines and MAX_PROFILE PROFILE lines; what is beyond is counted (`Invocation.dropped`),
never read. A job's log as a whole is not bounded (64 MiB a step, a gigabyte for a batch of a few
dozen invocations): the runner reads it a chunk at a time (runner/harness/joblog.py), and the parser
lists at most MAX_FORGED forged lines until its caller clears them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

Side = Literal["A", "B"]
Phase = Literal["setup", "build", "bench", "checks"]

NAME = re.compile(r"[\w.µ]+")
#: A plain decimal number in ASCII digits only: Python's `\d` and float() also take `١٢` or `１２`.
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_METRIC_START = re.compile(r"METRIC\s")
MARKER_PREFIX = "@@AR "
WALL_METRIC = "harness.wall_s"
"""The harness's own wall-clock seconds of a benchmark invocation (its BEGIN to its END marker:
`Invocation.seconds`), recorded per pair and side on the experiment and summarised next to each
decision under this name; a METRIC line of this name is rejected."""
ESCAPED_PREFIX = "@@AR!"
"""How the harness writes a line of a step's output that starts like a marker."""
PHASES: tuple[str, ...] = ("setup", "build", "bench", "checks")
MAX_LINE_BYTES = 65536
"""The longest line read as one (harness.sh folds a step's output at the same width)."""
MAX_SAMPLES = 1000
"""Samples one benchmark invocation may give (all metrics together); more are dropped, counted."""
MAX_REJECTED = 100
"""Rejected METRIC lines one invocation records; more are counted only."""
MAX_PROFILE = 1000
"""PROFILE lines one invocation records; more are counted only."""
MAX_FORGED = 1000
"""Forged lines `LogState.forged` lists until its caller clears it; more are not listed."""


@dataclass(frozen=True)
class Metric:
    name: str
    value: float


@dataclass(frozen=True)
class Rejected:
    """A METRIC line that could not be read; reported as a warning, never stored as a sample."""

    text: str
    reason: str


def parse_metric_line(line: str) -> Metric | Rejected | None:
    """One stdout line: a Metric, a Rejected metric attempt, or None when it is not a METRIC line."""
    line = line.rstrip("\r\n")
    if not _METRIC_START.match(line):
        return None
    body = line[len("METRIC") :].strip()
    name, sep, value = body.partition("=")
    name, value = name.strip(), value.strip()
    if not sep:
        return Rejected(line, "no '=' between name and value")
    if not NAME.fullmatch(name):
        return Rejected(line, f"metric name {name!r} must match [\\w.µ]+")
    if not value:
        return Rejected(line, f"metric {name}: empty value")
    if not NUMBER.fullmatch(value):
        return Rejected(line, f"metric {name}: {value!r} is not a plain number")
    number = float(value)
    if not math.isfinite(number):  # e.g. 1e999 overflows to inf
        return Rejected(line, f"metric {name}: {value!r} is not finite")
    return Metric(name, number)


def plain_number(text: str) -> float | None:
    """A finite number written as METRIC values are (ASCII decimal: `12`, `-0.5`, `1e3`), else None.
    For other inputs of numbers (analyze's files, a results.tsv): `١٢`, `１２`, `1_000`, `nan`,
    `0x10` are not numbers, whatever Python's float() accepts."""
    token = text.strip()
    if not NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


_PROFILE_START = re.compile(r"PROFILE\s")


@dataclass(frozen=True)
class ProfileShare:
    """A `PROFILE <symbol>=<share>` line: the fraction of the benchmark's time in one function."""

    symbol: str
    share: float


def parse_profile_line(line: str) -> ProfileShare | Rejected | None:
    """One stdout line: a ProfileShare, a Rejected profile attempt, or None when it is not one.

    The symbol is anything up to the last `=` (C++ names hold spaces, `::` and `<>`); the share a
    plain number from 0 to 1."""
    line = line.rstrip("\r\n")
    if not _PROFILE_START.match(line):
        return None
    symbol, sep, value = line[len("PROFILE") :].strip().rpartition("=")
    symbol, value = symbol.strip(), value.strip()
    if not sep or not symbol:
        return Rejected(line, "a PROFILE line is `PROFILE <symbol>=<share>`")
    if len(symbol) > 500 or not symbol.isprintable():
        return Rejected(line, "profile symbol: at most 500 printable characters")
    share = plain_number(value)
    if share is None or not 0.0 <= share <= 1.0:
        return Rejected(line, f"profile {symbol}: {value!r} is not a share between 0 and 1")
    return ProfileShare(symbol, share)


@dataclass(frozen=True)
class ProfileSample:
    """A PROFILE line printed inside one benchmark invocation."""

    pair: int
    side: Side
    symbol: str
    share: float
    line: int


# --- job logs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    pair: int
    side: Side
    metric: str
    seq: int
    value: float
    line: int
    """1-based line number in the job log."""


@dataclass(frozen=True)
class Invocation:
    """One run of the benchmark on one side of one pair, complete (its END marker was read)."""

    pair: int
    side: Side
    rc: int
    seconds: float | None
    samples: tuple[Sample, ...]
    rejected: tuple[tuple[int, Rejected], ...]
    """(line number, rejection) of the malformed METRIC lines it printed."""
    dropped: int = 0
    """METRIC and PROFILE lines beyond the caps (MAX_SAMPLES, MAX_REJECTED, MAX_PROFILE): not read."""
    end_line: int = 0
    """1-based line number of its END marker in the job log."""


@dataclass
class Step:
    """A build, a benchmark invocation or the checks: where it sits in the log, how it ended."""

    name: str
    """build-A, build-B, bench-<pair>-<side>, checks."""
    first_line: int
    last_line: int | None = None
    rc: int | None = None
    seconds: float | None = None
    cached: bool = False


@dataclass
class LogState:
    phase: str | None = None
    status: str | None = None
    """`done` or `failed` once the run script printed its final marker."""
    reason: str | None = None
    builds: dict[str, int] = field(default_factory=dict)
    checks_rc: int | None = None
    steps: list[Step] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)
    forged: list[int] = field(default_factory=list)
    """Lines that look like markers but carry the wrong nonce, or that a step printed (escaped);
    at most MAX_FORGED of them until the caller clears the list (it warns about a few only)."""
    isolation: str | None = None
    """What the harness ran the steps under (SANDBOX marker): uid+pid+mount, userns+pid+mount, none."""
    isolation_detail: str = ""
    """Why the isolation is weaker than it could be (SANDBOX marker's reason)."""
    tampered: tuple[str, str, str] | None = None
    """(step, side, path): the first protected path found changed, and after which step."""
    violation: str | None = None
    """The first inconsistency of the markers (a forgery): the job's samples cannot be trusted."""
    lines: int = 0
    profile: list[ProfileSample] = field(default_factory=list)
    """PROFILE lines printed inside benchmark invocations (optional; see parse_profile_line)."""
    profile_rejected: list[tuple[int, Rejected]] = field(default_factory=list)


class LogParser:
    """Incremental parser of one job's log; feed it bytes as they arrive, in order.

    Only complete lines are parsed (a partial last line waits for more bytes or `finish()`). Each
    `feed` returns the invocations that completed in that chunk, so the caller can store their
    samples as soon as they are known.
    """

    def __init__(self, nonce: str, pairs: range | None = None) -> None:
        """`pairs`: the pairs the batch asked for (markers of any other pair are a forgery)."""
        if not nonce:
            raise ValueError("a job log parser needs the job's nonce")
        self.nonce = nonce
        self.pairs = pairs
        self.state = LogState()
        self._seen: set[tuple[str, int, str]] = set()
        self._lines = LineSplitter()
        self._open: tuple[int, Side, float | None, int] | None = None
        self._samples: list[Sample] = []
        self._rejected: list[tuple[int, Rejected]] = []
        self._seq: dict[str, int] = {}
        self._dropped = 0
        self._profiled = 0
        self._step_open: dict[str, tuple[Step, float | None]] = {}

    def feed(self, data: bytes) -> list[Invocation]:
        return self._parse(self._lines.feed(data))

    def finish(self) -> list[Invocation]:
        """The log is complete: parse a last line without a newline."""
        return self._parse(self._lines.finish())

    @property
    def pending_bytes(self) -> int:
        """Bytes of a line not parsed yet (at most MAX_LINE_BYTES, however long the line)."""
        return self._lines.pending_bytes

    def _parse(self, pieces: list[tuple[bytes, bool]]) -> list[Invocation]:
        done: list[Invocation] = []
        for piece, continued in pieces:
            inv = self._line(piece.decode("utf-8", errors="replace"), continued=continued)
            if inv is not None:
                done.append(inv)
        return done

    @property
    def open_invocation(self) -> tuple[int, str] | None:
        """(pair, side) of a benchmark invocation that began and has not ended."""
        return None if self._open is None else (self._open[0], self._open[1])

    # -- internals -----------------------------------------------------------------------------

    def _line(self, text: str, *, continued: bool = False) -> Invocation | None:
        """One line of the log; `continued`: a piece of a longer line after its first, which is
        log text only (never a marker, never a sample; one shaped like a marker is a forgery)."""
        self.state.lines += 1
        number = self.state.lines
        text = text.rstrip("\r")
        if continued:
            if text.startswith(MARKER_PREFIX.rstrip()):  # escaped (`@@AR!`) or not
                self._forged(number)
            return None
        if text.startswith(MARKER_PREFIX):
            parts = text.split()
            if len(parts) >= 4 and parts[1] == self.nonce:
                return self._marker(number, _time(parts[2]), parts[3], parts[4:])
            self._forged(number)
            return None
        if text.startswith(ESCAPED_PREFIX):
            self._forged(number)  # a step printed a marker-like line; the harness escaped it
            return None
        if self._open is not None:
            found = parse_metric_line(text)
            if isinstance(found, Metric) and found.name == WALL_METRIC:
                found = Rejected(text, f"metric {WALL_METRIC} is the harness's own clock")
            if isinstance(found, Metric):
                if len(self._samples) >= MAX_SAMPLES:
                    self._dropped += 1
                    return None
                seq = self._seq.get(found.name, 0)
                self._seq[found.name] = seq + 1
                pair, side = self._open[0], self._open[1]
                self._samples.append(Sample(pair, side, found.name, seq, found.value, number))
            elif isinstance(found, Rejected):
                if len(self._rejected) >= MAX_REJECTED:
                    self._dropped += 1
                    return None
                self._rejected.append((number, found))
            else:
                self._profile_line(number, text)
        return None

    def _forged(self, number: int) -> None:
        if len(self.state.forged) < MAX_FORGED:
            self.state.forged.append(number)

    def _profile_line(self, number: int, text: str) -> None:
        found = parse_profile_line(text)
        if found is not None and self._profiled >= MAX_PROFILE:
            self._dropped += 1
            return
        if found is not None:
            self._profiled += 1
        if isinstance(found, ProfileShare) and self._open is not None:
            pair, side = self._open[0], self._open[1]
            self.state.profile.append(ProfileSample(pair, side, found.symbol, found.share, number))
        elif isinstance(found, Rejected):
            self.state.profile_rejected.append((number, found))

    def _marker(self, line: int, at: float | None, kind: str, args: list[str]) -> Invocation | None:
        state = self.state
        if kind == "PHASE" and args and args[0] in PHASES:
            state.phase = args[0]
        elif kind == "BUILD_BEGIN" and args:
            step = Step(f"build-{args[0]}", line)
            state.steps.append(step)
            self._step_open[step.name] = (step, at)
        elif kind == "BUILD_END" and len(args) >= 2:
            rc = _int(args[1])
            state.builds[args[0]] = rc
            name = f"build-{args[0]}"
            if name in self._step_open:
                step, began = self._step_open.pop(name)
            else:  # cached: no BEGIN marker
                step, began = Step(name, line, cached=len(args) > 2 and args[2] == "cached"), None
                state.steps.append(step)
            _close(step, line, rc, began, at)
        elif kind == "CHECKS_BEGIN":
            step = Step("checks", line)
            state.steps.append(step)
            self._step_open["checks"] = (step, at)
        elif kind == "CHECKS_END" and args:
            state.checks_rc = _int(args[0])
            step, began = self._step_open.pop("checks", (Step("checks", line), None))
            if step not in state.steps:
                state.steps.append(step)
            _close(step, line, state.checks_rc, began, at)
        elif kind == "BEGIN" and len(args) >= 2 and args[1] in ("A", "B"):
            side: Side = "A" if args[1] == "A" else "B"
            pair = _int(args[0])
            if self._open is not None:
                self._violate(f"log line {line}: BEGIN {pair} {side} inside another invocation")
            self._check("BEGIN", pair, side, line)
            self._open = (pair, side, at, line)
            self._samples, self._rejected, self._seq = [], [], {}
            self._dropped = self._profiled = 0
        elif kind == "END" and len(args) >= 3:
            if self._open is None or (self._open[0], self._open[1]) != (_int(args[0]), args[1]):
                self._violate(f"log line {line}: END {args[0]} {args[1]} without its BEGIN")
                return None
            pair, side, began, first = self._open
            self._check("END", pair, side, line)
            rc = _int(args[2])
            seconds = None if at is None or began is None else max(0.0, at - began)
            inv = Invocation(
                pair, side, rc, seconds, tuple(self._samples), tuple(self._rejected), self._dropped, line
            )
            state.invocations.append(inv)
            state.steps.append(Step(f"bench-{pair}-{side}", first, line, rc, seconds))
            self._open = None
            self._samples, self._rejected, self._seq = [], [], {}
            self._dropped = self._profiled = 0
            return inv
        elif kind == "STATUS" and args:
            if state.status is not None:
                self._violate(f"log line {line}: a second STATUS")
            state.status = args[0]
            state.reason = args[1] if len(args) > 1 else None
        elif kind == "SANDBOX" and args:
            state.isolation = args[0]
            state.isolation_detail = " ".join(args[1:])
        elif kind == "TAMPERED" and len(args) >= 3 and state.tampered is None:
            state.tampered = (args[0], args[1], " ".join(args[2:]))
        return None

    def _check(self, kind: str, pair: int, side: str, line: int) -> None:
        """A BEGIN or END must be the first of its (pair, side), within the batch's pairs, and the
        invocations at most the two sides of each pair asked for."""
        key = (kind, pair, side)
        if key in self._seen:
            self._violate(f"log line {line}: a second {kind} for pair {pair} {side}")
        self._seen.add(key)
        if self.pairs is not None and pair not in self.pairs:
            self._violate(
                f"log line {line}: pair {pair} is outside the batch's pairs "
                f"{self.pairs.start}..{self.pairs.stop - 1}"
            )
        if self.pairs is not None and kind == "BEGIN":
            begun = sum(1 for k, _, _ in self._seen if k == "BEGIN")
            if begun > 2 * len(self.pairs):
                self._violate(f"log line {line}: more invocations than the {2 * len(self.pairs)} asked for")

    def _violate(self, why: str) -> None:
        if self.state.violation is None:
            self.state.violation = why


class LineSplitter:
    """Bytes in, log lines out, numbered as the parser numbers them: split at newlines, and a line
    longer than MAX_LINE_BYTES cut in pieces (harness.sh folds a step's output the same way), each
    with whether it continues the line before it. The rest of a line waits for more bytes (never
    more than MAX_LINE_BYTES of it) or for `finish`."""

    def __init__(self) -> None:
        self._buffer = b""
        self._continued = False
        """The buffer holds the rest of a line already given in part."""

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """The lines (and pieces) `data` completes: (bytes without the newline, continues a line)."""
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        out: list[tuple[bytes, bool]] = []
        for raw in complete:
            out += self._cut(raw)
            self._continued = False
        while len(self._buffer) > MAX_LINE_BYTES:
            out.append((self._buffer[:MAX_LINE_BYTES], self._continued))
            self._buffer = self._buffer[MAX_LINE_BYTES:]
            self._continued = True
        return out

    def finish(self) -> list[tuple[bytes, bool]]:
        """The input ended: its last line, if it had no newline."""
        if not self._buffer:
            return []
        raw, self._buffer = self._buffer, b""
        out = self._cut(raw)
        self._continued = False
        return out

    def _cut(self, raw: bytes) -> list[tuple[bytes, bool]]:
        pieces = [raw[i : i + MAX_LINE_BYTES] for i in range(0, len(raw), MAX_LINE_BYTES)] or [raw]
        return [(piece, self._continued or i > 0) for i, piece in enumerate(pieces)]


def _close(step: Step, line: int, rc: int, began: float | None, at: float | None) -> None:
    step.last_line, step.rc = line, rc
    if began is not None and at is not None:
        step.seconds = max(0.0, at - began)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _time(text: str) -> float | None:
    try:
        return float(text.replace(",", "."))  # EPOCHREALTIME follows LC_NUMERIC
    except ValueError:
        return None
