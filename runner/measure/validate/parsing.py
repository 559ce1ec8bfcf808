"""The parse cross-check of a scaffolded benchmark: which output line each number came from, and
whether its regex is sure (one match per line, whole numbers, not part of a word)."""

from __future__ import annotations

import re

from runner.harness import metric_filter
from runner.harness.protocol import NUMBER
from runner.measure.validate.model import Finding, Measurement, MetricFigures


def parse_doubts(regex: str, primary: str, source: str) -> tuple[list[str], str]:
    """What makes a matched line doubtful for one regex: (problems, the line with the capture marked).

    A problem: the regex matches more than one place on the line (it takes the first, which may not
    be the one meant: the 14-vs-52 case), or a capture is only part of a number on the line."""
    pattern = re.compile(regex)
    problems: list[str] = []
    matches = list(pattern.finditer(source))
    got = metric_filter.metrics_of(source, pattern, primary) or []
    if len(matches) > 1:
        taken = ", ".join(repr(m.group(0)) for m in matches[:4])
        problems.append(f"the regex matches {len(matches)} places on the line ({taken}) and takes the first")
    numbers = [(m.start(), m.end()) for m in NUMBER.finditer(source)]
    for name, text, (start, end) in got:
        whole = next(((a, b) for a, b in numbers if a <= start < b or a < end <= b), None)
        if whole is not None and (whole[0] < start or whole[1] > end) and text.strip():
            problems.append(
                f"{name}: the capture {text!r} is part of the number {source[whole[0] : whole[1]]!r}"
            )
        elif (start > 0 and source[start - 1].isalpha()) or (end < len(source) and source[end].isalpha()):
            before = re.search(r"\w*\Z", source[:start])
            after = re.match(r"\w*", source[end:])
            word = (before.group(0) if before else "") + text + (after.group(0) if after else "")
            problems.append(
                f"{name}: the capture {text!r} is part of the word {word!r} (a label, not a result)"
            )
    marked = source
    for _name, _text, (start, end) in sorted(got, key=lambda g: -g[2][0]):
        marked = f"{marked[:start]}[{marked[start:end]}]{marked[end:]}"
    return problems, marked


def parse_check(
    m: Measurement, main: MetricFigures, primary: str, problems: list[Finding], advice: list[Finding]
) -> None:
    """The cross-check: which output line each number came from, and whether the regex is sure."""
    if not m.scaffold or not m.scaffold.get("regex"):
        return
    regex = str(m.scaffold["regex"])
    # Lines of different kinds feeding one metric (`result 990502` and `... 52.0 MB/s`): the regex
    # is loose, whatever each line looks like.
    shapes = list(
        dict.fromkeys(
            NUMBER.sub("N", s.source)
            for c in m.calls
            for s in c.samples
            if s.metric == primary and s.source is not None
        )
    )
    if len(shapes) > 1 and not m.accepted_parse:
        problems.append(
            Finding(
                "ambiguous_parse",
                f"the regex {regex!r} takes {primary} from {len(shapes)} kinds of output line "
                f"({'; '.join(repr(x) for x in shapes[:3])}): make it match only the line that holds "
                "the result (put the unit or the label next to the group), or accept it: "
                "autoresearch validate --accept-parse",
                {"shapes": shapes},
            )
        )
    for example in main.examples:
        source = example.get("source")
        if source is None:
            continue
        doubts, marked = parse_doubts(regex, primary, source)
        example["marked"] = marked
        if doubts and not m.accepted_parse:
            problems.append(
                Finding(
                    "ambiguous_parse",
                    f"the regex {regex!r} may take the wrong number from {source!r}: {'; '.join(doubts)}. "
                    "Tighten it (put the unit or the label next to the group) in the benchmark script, "
                    "or check the marked line and accept it: autoresearch validate --accept-parse",
                    {"line": source, "marked": marked, "doubts": doubts},
                )
            )
            return
