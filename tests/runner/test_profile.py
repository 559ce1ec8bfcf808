"""PROFILE lines: the benchmark may say where its time goes (`PROFILE <symbol>=<share>`); the job log
parser reads them apart from the samples, `autoresearch validate` records them with the baseline, and
the ranker ranks the hypotheses that touch those functions higher."""

from __future__ import annotations

import json
from pathlib import Path

from kb.db import rows
from runner import profile
from runner.harness.protocol import LogParser, ProfileShare, Rejected, parse_profile_line
from tests.conftest import make_repo
from tests.runner.onboarding_support import cli


def test_profile_lines_parse_strictly() -> None:
    assert parse_profile_line("PROFILE ggml_vec_dot_q4_0_q8_0=0.35") == ProfileShare(
        "ggml_vec_dot_q4_0_q8_0", 0.35
    )
    assert parse_profile_line("PROFILE void ns::f<int>(int, char*) = 0.1\n") == ProfileShare(
        "void ns::f<int>(int, char*)", 0.1
    )
    assert parse_profile_line("METRIC tg=3") is None and parse_profile_line("PROFILER x=1") is None
    for line, reason in (
        ("PROFILE f=1.5", "not a share between 0 and 1"),
        ("PROFILE f=35%", "not a share between 0 and 1"),
        ("PROFILE f=nan", "not a share between 0 and 1"),
        ("PROFILE =0.2", "PROFILE <symbol>=<share>"),
        ("PROFILE f", "PROFILE <symbol>=<share>"),
    ):
        found = parse_profile_line(line)
        assert isinstance(found, Rejected) and reason in found.reason, line


def test_the_log_parser_keeps_profile_lines_apart_from_samples() -> None:
    parser = LogParser("n0")
    done = parser.feed(
        b"PROFILE outside=0.5\n"
        b"@@AR n0 1.0 BEGIN 0 A\nMETRIC tg=10\nPROFILE mul_mat=0.4\nPROFILE bad=7\n@@AR n0 2.0 END 0 A 0\n"
        b"@@AR n0 2.0 BEGIN 0 B\nMETRIC tg=11\nPROFILE mul_mat=0.5\n@@AR n0 3.0 END 0 B 0\n"
    )
    assert [(s.side, s.metric, s.value) for inv in done for s in inv.samples] == [
        ("A", "tg", 10),
        ("B", "tg", 11),
    ]
    assert [(p.pair, p.side, p.symbol, p.share, p.line) for p in parser.state.profile] == [
        (0, "A", "mul_mat", 0.4, 4),
        (0, "B", "mul_mat", 0.5, 9),
    ]  # the line outside an invocation is log
    assert [(n, r.text) for n, r in parser.state.profile_rejected] == [(5, "PROFILE bad=7")]
    assert all(not inv.rejected for inv in done)  # not counted as malformed METRIC lines


BENCH = """#!/bin/sh
echo "METRIC tg128=100"
echo "METRIC tg128=101"
echo "PROFILE ggml_compute_forward_mul_mat=0.62"
echo "PROFILE ggml_vec_dot_q4_0_q8_0=0.21"
"""


def test_validate_records_the_profile_with_the_baseline(tmp_path: Path) -> None:
    target = make_repo(
        tmp_path / "t", {"autoresearch.sh": BENCH, "autoresearch.checks.sh": "#!/bin/sh\nexit 0\n"}
    )
    (target / "autoresearch.sh").chmod(0o755)
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--metric", "tg128")
    assert made.exit_code == 0, made.stderr
    result = cli("--workspace", str(ws), "validate", "--runs", "2", "--json")
    out = json.loads(result.stdout)
    assert out["measurement"]["status"] == "done", result.stdout[-2000:]
    assert [c["profile"] for c in out["measurement"]["calls"]] == [
        {"ggml_compute_forward_mul_mat": 0.62, "ggml_vec_dot_q4_0_q8_0": 0.21}
    ] * 2
    from kb.workspace import Workspace

    w = Workspace(ws)
    stored = rows(
        w.db(), "SELECT baseline_commit, symbol, share, calls, source FROM baseline_profiles ORDER BY symbol"
    )
    baseline = w.settings.target.baseline_commit
    assert stored == [
        {"baseline_commit": baseline, "symbol": "ggml_compute_forward_mul_mat", "share": 0.62, "calls": 2,
         "source": "validate"},
        {"baseline_commit": baseline, "symbol": "ggml_vec_dot_q4_0_q8_0", "share": 0.21, "calls": 2,
         "source": "validate"},
    ]  # fmt: skip
    assert profile.load(w.db(), baseline) == {
        "ggml_compute_forward_mul_mat": 0.62,
        "ggml_vec_dot_q4_0_q8_0": 0.21,
    }
    # A later profile replaces it whole; an empty one keeps it.
    assert profile.record(w.db(), baseline, {}, "validate") == 0
    assert profile.record(w.db(), baseline, profile.shares([{"f": 0.2}, {"f": 0.4}, {"g": 0.1}]), "x") == 2
    assert profile.load(w.db(), baseline) == {"f": 0.3, "g": 0.1}
