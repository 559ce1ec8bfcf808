"""Turn a benchmark command's output into METRIC lines: the filter of scaffolded `autoresearch.sh`.

`autoresearch init --bench-cmd CMD --metric-regex RE` writes a benchmark script that runs CMD and
pipes its output through this very file's source (embedded in the script, run by the worker's
`python3`); `autoresearch validate` imports it to cross-check what the script printed. So the rule
that reads a number out of a line lives here once. Standard library only: it runs on workers.

- A line that starts with `METRIC ` passes through unchanged (commands that print METRIC lines).
- A line the regex matches (`re.search`: the first match on the line) gives one METRIC line per
  metric: with named groups, each group that took part is a metric of that name; else group 1
  is the primary metric. It is printed after `# matched: <the line>`, so the log shows where each
  number came from.
- The script runs the command several times per call and feeds all their output at once, each
  run's output after a `SAMPLE_MARK` line (one interpreter start per call, not per run).
- A captured text that is not a plain number, or a run whose output gives no metric at all, exits
  non-zero with one line naming the regex: a wrong regex fails loudly rather than measuring nothing.
"""

from __future__ import annotations

import os
import re
import sys

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
MATCHED = "# matched: "
SAMPLE_MARK = "#@autoresearch-sample"
EXIT_NO_MATCH = 3
EXIT_NOT_A_NUMBER = 4


def metric_names(pattern: re.Pattern[str], primary: str) -> list[str]:
    """The metrics a regex yields: its named groups, else the primary metric from group 1."""
    return list(pattern.groupindex) or [primary]


def metrics_of(
    line: str, pattern: re.Pattern[str], primary: str
) -> list[tuple[str, str, tuple[int, int]]] | None:
    """(name, captured text, span in the line) for each metric the line gives; None without a match."""
    match = pattern.search(line)
    if match is None:
        return None
    if pattern.groupindex:
        return [
            (name, match.group(name), match.span(name))
            for name in pattern.groupindex
            if match.group(name) is not None
        ]
    return [(primary, match.group(1), match.span(1))]


def main() -> int:
    regex = os.environ.get("AR_METRIC_REGEX", "")
    primary = os.environ.get("AR_METRIC", "throughput")
    command = os.environ.get("AR_COMMAND", "the benchmark command")
    pattern = re.compile(regex) if regex else None
    found = 0
    lines = 0
    last = ""
    runs = 0
    for raw in sys.stdin:
        line = raw.rstrip("\r\n")
        if line.startswith(SAMPLE_MARK):
            if runs and not found:
                return _nothing(regex, command, runs, lines, last)
            runs += 1
            found = lines = 0
            last = ""
            continue
        lines += 1
        last = line or last
        if line.startswith("METRIC "):
            print(line)
            found += 1
            continue
        got = metrics_of(line, pattern, primary) if pattern is not None else None
        if not got:
            continue
        print(MATCHED + line)
        for name, text, _span in got:
            value = text.strip()
            if not NUMBER.fullmatch(value):
                print(
                    f"autoresearch.sh: the regex {regex!r} took {text!r} for {name} from {line!r}: "
                    "not a plain number (tighten the group to the digits)",
                    file=sys.stderr,
                )
                return EXIT_NOT_A_NUMBER
            print(f"METRIC {name}={value}")
            found += 1
    if found == 0:
        return _nothing(regex, command, max(runs, 1), lines, last)
    return 0


#: A number and the unit after it (`695.9 ms`, `6.55 GB/s`): what a suggested regex anchors on.
_WITH_UNIT = re.compile(r"(?<![\w.])[\d.]*\d[\d.]*\s?([A-Za-zµ%][\w/%µ]*)")


def suggest(line: str) -> str | None:
    """A regex that takes the last number-with-a-unit of `line` and nothing else, or None."""
    for match in reversed(list(_WITH_UNIT.finditer(line))):
        gap = " " if " " in match.group(0) else ""
        regex = r"([\d.]+)" + gap + re.escape(match.group(1)).replace("\\/", "/")
        found = re.findall(regex, line)
        if len(found) == 1 and NUMBER.fullmatch(found[0]):
            return regex
    return None


def _shown(command: str) -> str:
    """A command on one line, cut to a readable length (a `python3 -c` program has several)."""
    flat = " ".join(command.split())
    return flat if len(flat) <= 120 else flat[:117] + "..."


def _nothing(regex: str, command: str, run: int, lines: int, last: str) -> int:
    what = f"the regex `{regex}` matched no line of" if regex else "no METRIC line in"
    hint = suggest(last) if regex else None
    printed = (
        f"{lines} line{'' if lines == 1 else 's'}; last: {last[:160]!r}" if last else "it printed nothing"
    )
    print(
        f"autoresearch.sh: {what} the output of `{_shown(command)}` (run {run}: {printed})"
        + (f"; for its last number, try --metric-regex '{hint}'" if hint else ""),
        file=sys.stderr,
    )
    return EXIT_NO_MATCH


if __name__ == "__main__":
    sys.exit(main())
