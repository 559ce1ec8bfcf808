"""A candidate's flood of output costs the runner bounded memory: the real harness writes a job log
(the template's run script, a candidate build that prints 16 MiB), and the runner's readers parse it
and split its step logs a chunk at a time. Read whole, the same log takes twice its size, and
far more with short lines (a gigabyte of one-byte lines is tens of gigabytes)."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from runner.harness.joblog import READ_CHUNK, log_lines, read_new, write_step_logs
from runner.harness.protocol import MAX_FORGED, MAX_LINE_BYTES, LogParser
from tests.runner.test_harness import NONCE, prepared, run_template

T = TypeVar("T")
FLOOD = 16 << 20


def peak(call: Callable[[], T]) -> tuple[T, int]:
    """What `call` returns, and the most memory Python held for it at once (bytes)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flood_of_output_is_read_and_split_in_bounded_memory(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path)
    flood = f"head -c {FLOOD} /dev/zero | tr '\\\\0' x | fold -w 1023"
    build = f'make -s && if [ "${{PWD##*/}}" = b ]; then {flood}; fi'
    out, _ = run_template(ws, workdir, build, desc="flood", limits=(60, 10, 30))
    log = tmp_path / "batch-0.log"
    log.write_bytes(out.encode())
    size = log.stat().st_size
    assert size > FLOOD

    parser = LogParser(NONCE, range(1))
    (found, offset), used = peak(lambda: read_new(parser, log, 0))
    assert offset == size and parser.state.status == "done", out[-2000:]
    assert [(i.pair, i.side, len(i.samples)) for i in found] == [(0, "A", 1), (0, "B", 1)]
    assert used < 8 * READ_CHUNK, used
    whole = LogParser(NONCE, range(1))
    _, naive = peak(lambda: whole.feed(log.read_bytes()))
    assert naive > 2 * FLOOD  # read whole, the same log takes twice its size (with 1 KiB lines)
    assert whole.state.steps == parser.state.steps and whole.state.lines == parser.state.lines

    written, used = peak(lambda: write_step_logs(log, parser.state.steps))
    assert [p.name for p in written] == ["build-A.log", "build-B.log", "checks.log"]
    assert used < 8 * READ_CHUNK, used
    lines = log.read_bytes().split(b"\n")
    for step, path in zip(
        [s for s in parser.state.steps if not s.name.startswith("bench")], written, strict=True
    ):
        assert step.last_line is not None
        between = lines[step.first_line : step.last_line - 1]
        assert path.read_bytes() == b"".join(line + b"\n" for line in between), step.name
    assert (tmp_path / "build-B.log").stat().st_size > FLOOD


def test_log_lines_numbers_lines_as_the_parser_does(tmp_path: Path) -> None:
    """A line longer than MAX_LINE_BYTES is several lines to the parser, whatever the chunks."""
    log = tmp_path / "x.log"
    long = b"y" * (2 * MAX_LINE_BYTES + 5)
    edge = b"z" * MAX_LINE_BYTES
    log.write_bytes(b"a\n" + long + b"\n\n" + edge + b"\n" + b"w" * (3 * READ_CHUNK) + b"\nlast")
    with open(log, "rb") as fh:
        pieces = list(log_lines(fh))
    parser = LogParser(NONCE)
    data = log.read_bytes()
    for i in range(0, len(data), 7777):  # arbitrary chunks
        parser.feed(data[i : i + 7777])
    parser.finish()
    assert len(pieces) == parser.state.lines
    assert b"".join(pieces) == data.replace(b"\n", b"")
    assert [len(p) for p in pieces[:6]] == [1, MAX_LINE_BYTES, MAX_LINE_BYTES, 5, 0, MAX_LINE_BYTES]
    assert pieces[-1] == b"last"


def test_forged_lines_are_listed_up_to_a_cap_until_cleared() -> None:
    parser = LogParser(NONCE)
    parser.feed(b"@@AR! forged\n" * (MAX_FORGED + 500))
    assert len(parser.state.forged) == MAX_FORGED and parser.state.lines == MAX_FORGED + 500
    parser.state.forged.clear()  # what the runner does once it has warned
    parser.feed(b"@@AR 0000000000000000 1 STATUS done\n")
    assert parser.state.forged == [MAX_FORGED + 501] and parser.state.status is None


def test_the_repair_excerpt_reads_only_the_end_of_a_build_log(tmp_path: Path) -> None:
    """The model that repairs a failed build gets its last lines; a build log of 32 MiB of one-byte
    lines is read from its end only."""
    from runner.research.phase import EXCERPT_LINES, failure_excerpt

    log = tmp_path / "build-B.log"
    with open(log, "wb") as fh:
        for _ in range(32):
            fh.write(b"x\n" * (1 << 19))
        fh.write(b"".join(b"error %d\n" % i for i in range(100)))
    exp = {"meta": json.dumps({"logs": {"build-B": str(log)}})}
    text, used = peak(lambda: failure_excerpt(exp, "build"))  # type: ignore[arg-type]
    assert text.splitlines() == [f"error {i}" for i in range(100 - EXCERPT_LINES, 100)]
    assert used < 4 << 20, used
