"""What a second walk of "Using it on your own project" found (docs/onboarding.md: mmh3 and
sortedcontainers from their PyPI sdists): validate in the run's sandbox, the tools it hides, a
multi-line benchmark command, checks that run no test, a build command for a tree with no Makefile,
and advice that follows from the measured noise.

Real targets in real git repositories, the real `init`, and validate's real jobs on the baseline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kb.config import Settings, load_settings
from runner.measure.validate import Call, Measurement, Sample, evaluate
from tests.conftest import make_repo
from tests.runner.onboarding_support import cli, set_config


def validate(ws: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("--workspace", str(ws), "validate", "--json", *args)
    return result.exit_code, json.loads(result.output)


def kinds(findings: list[dict[str, Any]]) -> list[str]:
    return [f["kind"] for f in findings]


def test_validate_runs_in_the_runs_sandbox_and_names_the_tools_it_hides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mmh3's walk: `python3` was pyenv's shim under HOME, which the sandbox hides; the checks
    failed with "/usr/bin/python3: No module named pytest". sandbox.expose is the way, but
    validate ran without [sandbox] (so it kept failing) and nothing said why."""
    tools = tmp_path / "home" / "tools"
    tools.mkdir(parents=True)
    tool = tools / "speedtool"
    tool.write_text("#!/bin/sh\necho 'speed: 12.5 MB/s'\n")
    for path in (tool, tools, tools.parent):
        path.chmod(0o755)  # the sandbox's steps run as nobody
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    target = make_repo(tmp_path / "t", {"README.md": "a tree that builds nothing\n"})
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--bench-cmd", "speedtool",
               "--metric-regex", r"([\d.]+) MB/s", "--metric", "mbs", "--samples", "2",
               "--check-cmd", "true")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    set_config(ws, "policy", min_effect=0.5)

    code, out = validate(ws, "--runs", "2")
    if out["measurement"]["isolation"] in (None, "none"):
        pytest.skip("no sandbox on this machine: nothing is hidden from the steps")
    assert code == 1 and "benchmark_failed" in kinds(out["report"]["problems"])
    [hidden] = [a for a in out["report"]["advice"] if a["kind"] == "hidden_tool"]
    assert f"`speedtool` is {tool}" in hidden["message"] and "the steps run no speedtool" in hidden["message"]
    assert f'sandbox.expose = ["{tools}"]' in hidden["message"]

    # Following the advice: the run's sandbox shows the folder, and so does validate's.
    set_config(ws, "sandbox", expose=[str(tools)])
    refused = cli("--workspace", str(ws), "run")
    assert refused.exit_code == 1 and "the [sandbox] settings changed" in refused.stderr
    code, out = validate(ws, "--runs", "2")
    assert code == 0, out["report"]["problems"]
    assert "hidden_tool" not in kinds(out["report"]["advice"])
    assert out["report"]["metrics"][0]["values"] == [12.5] * 4


def test_a_multi_line_benchmark_command_is_still_a_scaffold_and_a_wrong_regex_gets_a_suggestion(
    tmp_path: Path,
) -> None:
    """sortedcontainers' walk: a `python3 -c` program of several lines. The script's BENCH_CMD
    spans lines, validate did not read it as scaffolded (no parse cross-check, the advice told to
    edit the script by hand), and a regex for seconds on a line in ms said only "matched no line"
    with the regex's backslashes doubled."""
    target = make_repo(tmp_path / "t", {"README.md": "pure Python\n"})
    program = (
        'python3 -c "\nimport time\nt = time.perf_counter()\nprint(f\\"add + remove: {1234.5:.1f} ms\\")\n"'
    )
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--bench-cmd", program,
               "--metric-regex", r"([\d.]+) s", "--metric", "add_ms", "--samples", "2",
               "--check-cmd", "true")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    # A time and no --direction: higher is the default, said at once (a run would keep slowdowns).
    assert "'add_ms' reads like a time but no --direction" in made.output
    set_config(ws, "policy", min_effect=0.5)
    code, out = validate(ws, "--runs", "2")
    [failed] = [p for p in out["report"]["problems"] if p["kind"] == "benchmark_failed"]
    assert r"the regex `([\d.]+) s` matched no line" in failed["message"]
    assert "(run 1: 1 line;" in failed["message"]
    assert r"try --metric-regex '([\d.]+) ms'" in failed["message"]
    assert out["measurement"]["scaffold"]["command"] == program

    script = ws / "autoresearch.sh"
    script.write_text(script.read_text().replace(r"METRIC_REGEX='([\d.]+) s'", r"METRIC_REGEX='([\d.]+) ms'"))
    code, out = validate(ws, "--runs", "2")
    assert out["measurement"]["scaffold"]["regex"] == r"([\d.]+) ms"
    [metric] = out["report"]["metrics"]
    assert metric["examples"][0]["source"] == "add + remove: 1234.5 ms"
    assert metric["examples"][0]["marked"] == "add + remove: [1234.5] ms"
    # A time with the default direction: the advice says so.
    assert "direction" in kinds(out["report"]["advice"])


def test_checks_that_run_no_test_fail_with_the_runners_summary(tmp_path: Path) -> None:
    """`python3 -m unittest` in a tree whose tests it does not find: Python 3.11 prints "Ran 0
    tests ... OK" and exits 0, so every patch passed the checks and validate said nothing."""
    target = make_repo(tmp_path / "t", {"lib.py": "def f():\n    return 1\n"})
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--bench-cmd",
               "echo 'speed: 1.5 MB/s'", "--metric-regex", r"([\d.]+) MB/s", "--samples", "1",
               "--check-cmd", "python3 -m unittest")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    code, out = validate(ws, "--runs", "2")
    assert code == 1
    [checks] = [p for p in out["report"]["problems"] if p["kind"] == "checks_failed"]
    # 3.11 exits 0 after "Ran 0 tests" (the script says it ran no test); 3.12+ exits 5 itself.
    assert "ran no test (Ran 0 tests" in checks["message"] or "NO TESTS RAN" in checks["message"]


@pytest.mark.parametrize(
    ("output", "passes"),
    [
        ("Ran 0 tests in 0.000s\n\nOK\n", False),  # unittest (3.11 exits 0)
        ("collected 0 items\n\n===== no tests ran in 0.01s =====\n", False),
        ("running 0 tests\n\ntest result: ok. 0 passed\n", False),  # cargo, no test at all
        ("?   \tpkg\t[no test files]\n", False),  # go test
        ("Ran 3 tests in 0.100s\n\nOK\n", True),
        ("running 4 tests\ntest result: ok. 4 passed\nrunning 0 tests\n", True),  # cargo's doc tests
        ("all good\n", True),  # not a test runner: nothing to judge
    ],
)
def test_the_checks_script_tells_a_run_of_no_test_from_a_run_of_some(
    tmp_path: Path, output: str, passes: bool
) -> None:
    from runner.harness.scaffold import checks_script

    (tmp_path / "out.txt").write_text(output)
    script = tmp_path / "checks.sh"
    script.write_text(checks_script("cat out.txt"))
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert (run.returncode == 0) is passes, run.stdout
    if not passes:
        assert "passed but ran no test" in run.stdout and "cat out.txt" in run.stdout


def test_the_default_build_command_on_a_tree_without_a_makefile(tmp_path: Path) -> None:
    """A pure-Python tree and no --build-cmd: init was silent, and validate's "make: *** No
    targets specified" did not say which setting runs make."""
    target = make_repo(tmp_path / "t", {"pkg/__init__.py": "X = 1\n"})
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--bench-cmd", "echo 'speed: 1.5 MB/s'",
               "--metric-regex", r"([\d.]+) MB/s", "--check-cmd", "true")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    assert "no --build-cmd, and the tree has no Makefile for the default `make -j$(nproc)`" in made.output
    code, out = validate(ws, "--runs", "2")
    [build] = [p for p in out["report"]["problems"] if p["kind"] == "build_failed"]
    assert "No targets specified and no makefile found" in build["message"]
    assert "target.build_cmd = 'make -j$(nproc)' in autoresearch.toml" in build["message"]
    # With a Makefile, or with --build-cmd, there is nothing to warn about.
    made = cli("init", str(tmp_path / "ws2"), "--target", str(target), "--build-cmd", "true",
               "--bench-cmd", "true")  # fmt: skip
    assert made.exit_code == 0 and "no --build-cmd" not in made.output


def _measurement(per_call: list[list[float]], samples: int) -> Measurement:
    m = Measurement("f", {}, "c" * 40, 0.0, len(per_call), "/logs", "done", cores=2)
    m.scaffold = {"command": "bench", "regex": r"([\d.]+) GB/s", "metric": "gbs", "samples": samples}
    for i, values in enumerate(per_call):
        m.calls.append(
            Call(i // 2, "AB"[i % 2], 0, 2.0, [Sample("gbs", v, f"METRIC gbs={v}", None) for v in values])
        )
    return m


def gbs_workspace(tmp_path: Path) -> Settings:
    """A workspace on a fresh repository, primary metric gbs: its settings, as validate reads them."""
    make_repo(tmp_path / "t")
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(tmp_path / "t"), "--build-cmd", "true", "--metric", "gbs")
    assert made.exit_code == 0, made.output
    return load_settings(ws / "autoresearch.toml")


def test_the_floor_is_never_below_what_the_samples_spread_gives_a_median(tmp_path: Path) -> None:
    """mmh3's walk: five samples per call spread by 2%, printed with two decimals, gave the same
    median (6.48) in every call; validate said it resolves ±0.06% in 80 pairs, the run's A/A
    self-test then measured a floor of ±1.8%."""
    settings = gbs_workspace(tmp_path)
    samples = [6.34, 6.48, 6.61, 6.40, 6.55]
    report = evaluate(_measurement([samples, samples, samples, list(reversed(samples))], 5), settings)
    [gbs] = report.metrics
    assert gbs.call_noise == 0.0 and gbs.sample_noise is not None and gbs.floor is not None
    # The median of 5 samples varies by about 1.25 x 1.6% / sqrt(5): a pair's log ratio by sqrt(2) x that.
    assert gbs.pair_sd == pytest.approx(2**0.5 * 1.25 * gbs.sample_noise / 5**0.5, rel=0.05)
    assert gbs.floor > 0.002


def test_too_noisy_says_what_lowers_the_noise_when_more_samples_would_not(tmp_path: Path) -> None:
    """The problem said "lower the noise: more runs per call (AR_SAMPLES ...)" while the advice
    under it said "more samples per call will not help much": calls that vary more than their
    samples explain need a longer workload or a quieter machine."""
    settings = gbs_workspace(tmp_path)
    calls = [[5.9, 5.95, 6.0], [4.6, 4.65, 4.7], [5.3, 5.35, 5.4], [6.2, 6.25, 6.3]]
    report = evaluate(_measurement(calls, 3), settings)
    [noisy] = [p for p in report.problems if p.kind == "too_noisy_for_min_effect"]
    assert "AR_SAMPLES" not in noisy.message and "a longer workload per sample" in noisy.message
    assert "between_call_noise" in [a.kind for a in report.advice]
    # Calls that vary as their samples do: more runs per call is the way.
    even = [[5.0, 5.6, 6.2], [5.1, 5.7, 6.1], [4.9, 5.5, 6.3], [5.2, 5.4, 6.0]]
    [noisy] = [
        p for p in evaluate(_measurement(even, 3), settings).problems if p.kind == "too_noisy_for_min_effect"
    ]
    assert "AR_SAMPLES" in noisy.message


def test_hidden_tools_are_found_through_the_path_and_shown_as_the_steps_see_them(tmp_path: Path) -> None:
    from runner.measure.validate.hidden import hidden_tools, programs

    assert programs("FOO=1 env X=2 python3 -m pytest -q && make -s | tee log; $(gcc --version)") == [
        "python3",
        "make",
        "tee",
        "gcc",
    ]
    home, system = tmp_path / "home", tmp_path / "usr" / "bin"
    (home / ".pyenv" / "shims").mkdir(parents=True)
    system.mkdir(parents=True)
    for path in (
        home / ".pyenv" / "shims" / "python3",
        system / "python3",
        home / ".pyenv" / "shims" / "pip",
    ):
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    search = os.pathsep.join([str(home / ".pyenv" / "shims"), str(system)])
    found = hidden_tools(
        ["python3 -m pytest", "pip --version", "./bench/run", sys.executable], [home], [], search
    )
    by_name = {t.name: t for t in found}
    assert set(by_name) == {"python3", "pip"}
    assert by_name["python3"].instead == str(system / "python3")
    assert by_name["pip"].instead is None and by_name["pip"].expose == str(home / ".pyenv")
    assert hidden_tools(["python3"], [home], [home / ".pyenv"], search) == []


def test_a_benchmark_that_prints_nothing_says_so(tmp_path: Path) -> None:
    """Was "(run 1: 0 lines; last: '')"."""
    target = make_repo(tmp_path / "t")
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--bench-cmd", "true",
               "--metric-regex", r"([\d.]+) MB/s", "--samples", "1")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    run = subprocess.run(["bash", str(ws / "autoresearch.sh")], cwd=target, capture_output=True, text=True)
    assert run.returncode == 3
    assert (
        r"the regex `([\d.]+) MB/s` matched no line of the output of `true` (run 1: it printed nothing)"
        in run.stderr
    )


def test_the_filters_python3_is_no_advice_while_the_steps_have_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scaffold's filter runs on any python3: a pyenv shim first on PATH, with /usr/bin's in
    the steps, is no reason to expose pyenv (it was advice on every scaffolded workspace here)."""
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None:
        pytest.skip("no python3 outside HOME")
    shims = tmp_path / "home" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3").symlink_to(system)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    target = make_repo(tmp_path / "t")
    ws = tmp_path / "ws"
    made = cli("init", str(ws), "--target", str(target), "--build-cmd", "true", "--bench-cmd",
               "echo 'speed: 1.5 MB/s'", "--metric-regex", r"([\d.]+) MB/s", "--samples", "1",
               "--check-cmd", "true")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    code, out = validate(ws, "--runs", "2")
    if out["measurement"]["isolation"] in (None, "none"):
        pytest.skip("no sandbox on this machine: nothing is hidden from the steps")
    assert "hidden_tool" not in kinds(out["report"]["advice"]), out["report"]["advice"]


def test_the_advice_counts_the_samples_that_ran_not_the_scripts_default(tmp_path: Path) -> None:
    """mmh3's walk, after AR_SAMPLES = "10" in [target.env] as advised: validate said "the
    scaffold runs the command 5 times" and advised AR_SAMPLES = "6", fewer than ran."""
    settings = gbs_workspace(tmp_path)
    spread = [5.0, 5.3, 5.6, 5.9, 6.2, 6.5, 6.8, 7.1, 5.15, 6.95]
    calls = [spread, list(reversed(spread)), spread[1:] + spread[:1], spread[2:] + spread[:2]]
    report = evaluate(_measurement(calls, 5), settings)  # the script's default: 5; 10 ran
    [noisy] = [p for p in report.problems if p.kind == "too_noisy_for_min_effect"]
    assert "the scaffold runs the command 10 times" in noisy.message
    [more] = [a for a in report.advice if a.kind in ("more_samples", "longer_samples")]
    assert more.data["samples"] > 10
