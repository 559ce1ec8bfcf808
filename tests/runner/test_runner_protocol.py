"""METRIC lines are parsed strictly; job logs are read marker by marker, incrementally."""

from __future__ import annotations

import pytest

from runner.harness.protocol import LogParser, Metric, Rejected, parse_metric_line


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("METRIC throughput=12.5", "throughput", 12.5),
        ("METRIC tg=41", "tg", 41.0),
        ("METRIC pp.512=1e3", "pp.512", 1000.0),
        ("METRIC µs=-3.25E-2", "µs", -0.0325),
        ("METRIC t_s=.5\r\n", "t_s", 0.5),
        ("METRIC  x = 7 ", "x", 7.0),
    ],
)
def test_valid_metric_lines(line: str, name: str, value: float) -> None:
    assert parse_metric_line(line) == Metric(name, value)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("METRIC x=nan", "not a plain number"),
        ("METRIC x=NaN", "not a plain number"),
        ("METRIC x=inf", "not a plain number"),
        ("METRIC x=-Infinity", "not a plain number"),
        ("METRIC x=1e999", "not finite"),
        ("METRIC tg=12 t/s", "not a plain number"),
        ("METRIC x=", "empty value"),
        ("METRIC x=1,5", "not a plain number"),
        ("METRIC x=0x10", "not a plain number"),
        ("METRIC x 12", "no '='"),
        ("METRIC bad-name=3", "must match"),
        ("METRIC =3", "must match"),
    ],
)
def test_malformed_metric_lines_are_rejected_never_zero(line: str, why: str) -> None:
    found = parse_metric_line(line)
    assert isinstance(found, Rejected)
    assert why in found.reason
    assert found.text == line


@pytest.mark.parametrize("line", ["METRICS x=1", "metric x=1", "  METRIC x=1", "tg 41.0", "", "METRIC"])
def test_other_lines_are_log(line: str) -> None:
    assert parse_metric_line(line) is None


NONCE = "n0nce"


def mark(kind: str, *args: object, at: float = 100.0) -> str:
    return " ".join(["@@AR", NONCE, str(at), kind, *map(str, args)]) + "\n"


def test_log_parser_reads_samples_between_markers_only() -> None:
    log = "".join(
        [
            "experiment 3 batch 0: title\n",
            mark("PHASE", "build"),
            mark("BUILD_BEGIN", "A", at=1.0),
            "METRIC throughput=999\n",  # build output: not a sample
            mark("BUILD_END", "A", 0, at=3.5),
            mark("BUILD_END", "B", 0, "cached"),
            mark("PHASE", "bench"),
            mark("BEGIN", 0, "A", at=10.0),
            "METRIC throughput=10\n",
            "METRIC throughput=12\n",
            "METRIC x=nan\n",
            "noise on stdout\n",
            mark("END", 0, "A", 0, at=10.25),
            "METRIC throughput=5\n",  # between invocations: not a sample
            mark("BEGIN", 0, "B", at=11.0),
            "METRIC µs=3\n",
            "@@AR wrongnonce 1.0 END 0 B 0\n",  # printed by the benchmark: forged
            "METRIC throughput=20\n",
            mark("END", 0, "B", 0, at=11.5),
            mark("PHASE", "checks"),
            mark("CHECKS_BEGIN", at=20.0),
            mark("CHECKS_END", 1, at=21.0),
            mark("STATUS", "failed", "checks"),
            "EXPERIMENT_REASON: checks\n",
            "EXPERIMENT_STATUS: failed\n",
        ]
    )
    parser = LogParser(NONCE)
    data = log.encode()
    invocations = []
    # Byte-by-byte feeding splits lines and the two bytes of µ: nothing may be lost or doubled.
    for i in range(0, len(data), 7):
        invocations += parser.feed(data[i : i + 7])
    invocations += parser.finish()
    state = parser.state
    assert [(i.pair, i.side, i.rc) for i in invocations] == [(0, "A", 0), (0, "B", 0)]
    a, b = invocations
    assert [(s.metric, s.seq, s.value) for s in a.samples] == [
        ("throughput", 0, 10.0),
        ("throughput", 1, 12.0),
    ]
    assert [(s.metric, s.seq, s.value) for s in b.samples] == [("µs", 0, 3.0), ("throughput", 0, 20.0)]
    assert a.seconds == pytest.approx(0.25)
    assert [r.text for _, r in a.rejected] == ["METRIC x=nan"]
    assert a.rejected[0][0] == 11  # 1-based log line of the rejected metric
    assert state.forged == [17]
    assert state.builds == {"A": 0, "B": 0}
    assert state.checks_rc == 1
    assert (state.status, state.reason, state.phase) == ("failed", "checks", "checks")
    steps = {s.name: s for s in state.steps}
    assert steps["build-A"].seconds == pytest.approx(2.5)
    assert steps["build-B"].cached
    assert steps["checks"].rc == 1 and steps["checks"].seconds == pytest.approx(1.0)
    assert steps["bench-0-B"].first_line == 15
    assert state.lines == log.count("\n")


def test_log_parser_keeps_an_unfinished_invocation_open() -> None:
    parser = LogParser(NONCE)
    found = parser.feed((mark("BEGIN", 4, "B") + "METRIC throughput=3\n").encode())
    assert found == [] and parser.open_invocation == (4, "B")
    # A partial line waits for its newline; finish() reads it.
    assert parser.feed(mark("END", 4, "B", 124).rstrip("\n").encode()) == []
    (inv,) = parser.finish()
    assert (inv.pair, inv.side, inv.rc, len(inv.samples)) == (4, "B", 124, 1)


def test_parser_needs_a_nonce() -> None:
    with pytest.raises(ValueError):
        LogParser("")


def _log(*markers: str, nonce: str = "n0nce") -> LogParser:
    parser = LogParser(nonce)
    parser.feed("".join(f"@@AR {nonce} {i}.0 {m}\n" for i, m in enumerate(markers)).encode())
    parser.finish()
    return parser


@pytest.mark.parametrize(
    ("isolation", "failing", "said"),
    [
        (
            "none",
            ("BEGIN 0 A", "END 0 A 1"),
            "bench-0-A exited 1 (the baseline's tree); without isolation the candidate's processes"
            " can reach that tree",
        ),
        ("uid+pid+mount", ("BEGIN 0 A", "END 0 A 2"), "bench-0-A exited 2 (the baseline's tree)"),
        ("none", ("BEGIN 0 B", "END 0 B 139"), "bench-0-B exited 139 (the candidate's tree)"),
        ("none", ("BUILD_BEGIN B", "BUILD_END B 2"), "build-B exited 2 (the candidate's tree)"),
    ],
)
def test_a_failed_job_names_its_step_and_whose_tree(
    isolation: str, failing: tuple[str, str], said: str
) -> None:
    from runner.measure.outcome import failed_step

    parser = _log(
        f"SANDBOX {isolation}", "BUILD_BEGIN A", "BUILD_END A 0", *failing, "STATUS failed benchmark"
    )
    assert failed_step(parser.state) == said


def test_a_job_with_no_failed_step_names_none() -> None:
    from runner.measure.outcome import failed_step

    assert failed_step(_log("SANDBOX none", "BEGIN 0 A", "END 0 A 0", "STATUS done").state) is None


@pytest.mark.parametrize(
    ("marker", "said"),
    [
        (("build-B", "B", "autoresearch.sh"), "tampered: autoresearch.sh changed during build-B"),
        (("build-B", "A", "prog"), "tampered: prog changed during build-B (in tree A)"),
        (("checks", "A", "prog"), "tampered: prog changed during checks (in tree A)"),
        (("bench-3-A", "A", "Makefile"), "tampered: Makefile changed during bench-3-A"),
        (("after-bench-0-B", "A", "prog"), "tampered: prog changed after bench-0-B (in tree A)"),
        (("after-checks", "B", "autoresearch.sh"), "tampered: autoresearch.sh changed after checks"),
    ],
)
def test_a_tampered_marker_names_the_path_the_step_and_the_tree(
    marker: tuple[str, str, str], said: str
) -> None:
    from runner.measure.outcome import tampered_reason

    assert tampered_reason(*marker) == said


def test_a_line_with_no_end_is_read_in_pieces_and_none_of_them_is_a_marker() -> None:
    from runner.harness.protocol import MAX_LINE_BYTES

    nonce = "n0nce"
    parser = LogParser(nonce)
    # A step's endless line, then (at a piece's start) something shaped like a marker with the nonce.
    flood = b"x" * (3 * MAX_LINE_BYTES) + f"@@AR {nonce} 0 BEGIN 0 B".encode()
    for start in range(0, len(flood), 10_000):  # arriving in chunks, as a log grows
        parser.feed(flood[start : start + 10_000])
    assert parser.pending_bytes <= MAX_LINE_BYTES  # memory stays bounded while the line goes on
    parser.feed(b"\n")
    parser.finish()
    assert parser.state.lines == 4
    assert parser.open_invocation is None and parser.state.violation is None


def test_an_invocation_gives_at_most_max_samples_and_counts_the_rest() -> None:
    from runner.harness.protocol import MAX_REJECTED, MAX_SAMPLES

    nonce = "n0nce"
    body = "".join(f"METRIC throughput={i}\n" for i in range(MAX_SAMPLES + 30))
    body += "METRIC throughput=nan\n" * (MAX_REJECTED + 7)
    log = f"@@AR {nonce} 1.0 BEGIN 0 A\n{body}@@AR {nonce} 2.0 END 0 A 0\n"
    parser = LogParser(nonce)
    (inv,) = parser.feed(log.encode())
    assert len(inv.samples) == MAX_SAMPLES and [s.value for s in inv.samples[:2]] == [0.0, 1.0]
    assert len(inv.rejected) == MAX_REJECTED
    assert inv.dropped == 30 + 7
    assert inv.end_line == MAX_SAMPLES + 30 + MAX_REJECTED + 7 + 2
