"""Scaffolded benchmark and checks scripts for a target that has none (`init --bench-cmd`).

    text = bench_script(BenchSpec("./bench/run 64", r"([\\d.]+) MB/s", "throughput", samples=5))
    spec = read_bench_script(text)            # the same spec back (validate reads it)
    protect = harness_paths(["./bench/run 64"], tree_files)   # ["bench/run.c"]

The benchmark script runs the command in the tree's root (the runner starts it there) AR_SAMPLES
times, quietly (its output is shown only when it fails), and turns each output into METRIC lines
with runner/harness/metric_filter.py, whose source it embeds: so the worker needs bash and python3, and the
rule that reads the numbers is the one `autoresearch validate` checks against. With a model,
`draft_spec` asks it for the build command, the benchmark command and the regex from the tree's
build files and README; the caller shows the draft before anything is written.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from kb.errors import UserError
from kb.init import Prepare, Prepared
from kb.packaged import packaged
from kb.vocabulary import reads_like_time
from runner.harness import metric_filter

if TYPE_CHECKING:
    import git
    import sqlite_utils

    from kb.config import LLMSettings
    from kb.workspace import Workspace

MARK = "# autoresearch scaffold v1"
NO_CHECKS = "# autoresearch scaffold: no checks"
DEFAULT_SAMPLES = 5
_NAME = re.compile(r"[\w.µ]+")
#: A command naming `bench/run` (a build output) protects the source it is built from.
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".rs", ".go", ".py", ".sh", ".pl", ".js", ".java")


@dataclass(frozen=True)
class BenchSpec:
    command: str
    """Shell command run in the tree's root after the build."""
    regex: str
    """Python regex over each output line: one group, or named groups; empty: METRIC lines as printed."""
    metric: str
    """The primary metric's name (what an unnamed group is called)."""
    samples: int = DEFAULT_SAMPLES
    """Times one call of the script runs the command (AR_SAMPLES overrides it)."""


def check_spec(spec: BenchSpec) -> list[str]:
    """The metric names the spec yields; a one-line UserError naming the option otherwise."""
    if not spec.command.strip():
        raise UserError("--bench-cmd: must not be empty")
    if spec.samples < 1:
        raise UserError(f"--samples {spec.samples}: must be at least 1")
    if not _NAME.fullmatch(spec.metric):
        raise UserError(f"--metric {spec.metric!r}: must match [\\w.µ]+")
    if not spec.regex:
        return [spec.metric]
    try:
        pattern = re.compile(spec.regex)
    except re.error as exc:
        raise UserError(f"--metric-regex {spec.regex!r}: not a valid regex ({exc})") from None
    if pattern.groupindex:
        bad = [name for name in pattern.groupindex if not _NAME.fullmatch(name)]
        if bad:
            raise UserError(f"--metric-regex: group name {bad[0]!r} is not a metric name ([\\w.µ]+)")
        if pattern.groups != len(pattern.groupindex):
            raise UserError("--metric-regex: mixes named and unnamed groups; make the others (?:...) groups")
    elif pattern.groups != 1:
        raise UserError(
            f"--metric-regex {spec.regex!r}: needs exactly one group around the number (has "
            f"{pattern.groups}), or named groups (?P<name>...) for several metrics"
        )
    return metric_filter.metric_names(pattern, spec.metric)


def _filter_source() -> str:
    return packaged("runner.harness", "metric_filter.py").read_text(encoding="utf-8")


def bench_script(spec: BenchSpec) -> str:
    check_spec(spec)
    source = _filter_source()
    if any(line.strip() == "PY" for line in source.splitlines()):
        raise AssertionError("the filter source must not hold the heredoc's end line")
    return f"""#!/usr/bin/env bash
{MARK}: written by `autoresearch init --bench-cmd`. Edit it freely, then run
# `autoresearch validate` again. The runner starts it in the root of the tree under test; it runs the
# benchmark command AR_SAMPLES times (default below; set AR_SAMPLES in [target.env] to change it)
# and prints one METRIC line per number the regex takes from the command's output, after the line
# it came from (`# matched: ...`). The command's own output is shown only when it fails. Needs
# bash and python3 on the worker (AR_PYTHON to name another interpreter).
set -euo pipefail

BENCH_CMD={shlex.quote(spec.command)}
METRIC_REGEX={shlex.quote(spec.regex)}
METRIC_NAME={shlex.quote(spec.metric)}
SAMPLES="${{AR_SAMPLES:-{spec.samples}}}"
PYTHON="${{AR_PYTHON:-python3}}"

# runner/harness/metric_filter.py of autoresearch: METRIC lines from the regex, or passed through.
FILTER=$(cat <<'PY'
{source.rstrip()}
PY
)

out="$(mktemp)"
all="$(mktemp)"
trap 'rm -f "$out" "$all"' EXIT
for ((i = 1; i <= SAMPLES; i++)); do
  rc=0
  bash -c "$BENCH_CMD" >"$out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "autoresearch.sh: the benchmark command failed (exit $rc): $BENCH_CMD" >&2
    tail -n 20 "$out" >&2
    exit "$rc"
  fi
  echo "{metric_filter.SAMPLE_MARK} $i" >>"$all"
  cat "$out" >>"$all"
done
AR_METRIC_REGEX="$METRIC_REGEX" AR_METRIC="$METRIC_NAME" AR_COMMAND="$BENCH_CMD" \\
  "$PYTHON" -c "$FILTER" <"$all"
"""


def checks_script(command: str | None) -> str:
    """The checks script: the command run quietly in the tree's root, or none (with a warning)."""
    if command is None or not command.strip():
        return f"""#!/usr/bin/env bash
{NO_CHECKS}. Written by `autoresearch init` without --check-cmd: every
# candidate passes, so a fast but wrong patch can be kept. Replace the line below with a command
# that exits non-zero on a wrong result (a test suite, a comparison with the baseline's output).
echo "autoresearch.checks.sh: no checks configured (autoresearch init --check-cmd); every candidate passes"
"""
    return f"""#!/usr/bin/env bash
{MARK}: written by `autoresearch init --check-cmd`. Edit it freely, then run
# `autoresearch validate` again. The runner starts it in the root of the candidate's tree after the
# build; it must exit non-zero on any wrong result. The command's output is shown only when it fails.
set -euo pipefail

CHECK_CMD={shlex.quote(command)}
# A test runner's summary of a run that ran no test (unittest, pytest, ctest, cargo, go, jest,
# node), and of one that ran some: a command that runs none passes whatever a patch does.
NO_TESTS={shlex.quote(NO_TESTS_RE)}
SOME_TESTS={shlex.quote(SOME_TESTS_RE)}

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
rc=0
bash -c "$CHECK_CMD" >"$out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "autoresearch.checks.sh: the check command failed (exit $rc): $CHECK_CMD"
  tail -n 40 "$out"
  exit "$rc"
fi
if none=$(grep -Em 1 "$NO_TESTS" "$out") && ! grep -Eq "$SOME_TESTS" "$out"; then
  echo "autoresearch.checks.sh: the check command passed but ran no test ($none): it would pass" \
    "any patch; make it run the tests (name their folder or files): $CHECK_CMD"
  exit 1
fi
echo "checks passed: $CHECK_CMD"
"""


#: Test runners' summaries of a run that ran no test (ERE, for the checks script's grep).
NO_TESTS_RE = (
    r"^Ran 0 tests|[Nn]o tests ran|NO TESTS RAN|collected 0 items|No tests were found|"
    r"^running 0 tests|no test files|^Tests: +0 total|^# tests 0$"
)
#: ... and of one that ran some (cargo prints `running 0 tests` for its doc tests beside the others).
SOME_TESTS_RE = (
    r"^Ran [1-9][0-9]* tests?|[1-9][0-9]* passed|^running [1-9][0-9]* tests?|"
    r"tests passed|^ok +[^ ]|^# (tests|pass) [1-9]"
)


def _assigned(text: str, name: str) -> str | None:
    """The value of `NAME=<one shell word>` in the script; the word may span lines (a quoted
    multi-line command, as shlex.quote writes a `python3 -c` program of several lines)."""
    match = re.search(rf"^{name}=", text, re.MULTILINE)
    if match is None:
        return None
    value = ""
    for line in text[match.end() :].splitlines(keepends=True):
        value += line
        try:
            parts = shlex.split(value)
        except ValueError:
            continue  # a quote still open: the word goes on on the next line
        return parts[0] if len(parts) == 1 else ("" if not parts else None)
    return None


def read_bench_script(text: str) -> BenchSpec | None:
    """The spec of a scaffolded benchmark script (as edited since), or None for any other script."""
    if MARK not in text:
        return None
    command = _assigned(text, "BENCH_CMD")
    regex = _assigned(text, "METRIC_REGEX")
    metric = _assigned(text, "METRIC_NAME")
    samples = re.search(r'^SAMPLES="\$\{AR_SAMPLES:-(\d+)\}"', text, re.MULTILINE)
    if command is None or regex is None or metric is None:
        return None
    return BenchSpec(command, regex, metric, int(samples.group(1)) if samples else DEFAULT_SAMPLES)


def read_check_command(text: str) -> str | None:
    """The command of a scaffolded checks script (as edited since), or None for any other script."""
    return _assigned(text, "CHECK_CMD") if MARK in text else None


def has_no_checks(text: str) -> bool:
    return NO_CHECKS in text


# --- what to protect -------------------------------------------------------------------------------


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out: list[str] = []
    for word in words:
        out.append(word)
        if "=" in word:
            out.append(word.split("=", 1)[1])
        if " " in word:  # bash -c '...': the inner command's words too
            out.extend(_words(word))
    return out


def harness_paths(commands: list[str], tree_files: list[str]) -> list[str]:
    """Files of the tree the commands name (the benchmark harness, a test script), the source a
    named build output comes from (`./bench/run` -> `bench/run.c`), or a named Python module
    (`tests.test_x` -> `tests/test_x.py`)."""
    files = set(tree_files)
    found: dict[str, None] = {}
    for command in commands:
        for word in _words(command):
            if not word or word.startswith("-") or word.startswith("/") or "$" in word:
                continue
            path = posixpath.normpath(word)
            if path.startswith("..") or path == ".":
                continue
            if path in files:
                found.setdefault(path, None)
                continue
            for suffix in _SOURCE_SUFFIXES:
                if path + suffix in files:
                    found.setdefault(path + suffix, None)
            module = word.replace(".", "/") + ".py"  # `python -m unittest tests.test_x`
            if "." in word and module in files:
                found.setdefault(module, None)
    return list(found)


# --- a first draft from a model ---------------------------------------------------------------------

_BUILD_FILES = (
    "Makefile", "GNUmakefile", "makefile", "CMakeLists.txt", "meson.build", "configure.ac",
    "setup.py", "pyproject.toml", "setup.cfg", "Cargo.toml", "go.mod", "package.json", "build.zig",
    "SConstruct", "BUILD", "BUILD.bazel", "justfile",
)  # fmt: skip
_MAKEFILES = frozenset({"Makefile", "makefile", "GNUmakefile"})
_README = re.compile(r"(?i)readme(\.(md|rst|txt|markdown))?")


class ScriptDraft(BaseModel):
    """A model's proposal for benchmarking a tree (schema-checked; shown before it is used)."""

    build_cmd: str = Field(min_length=1, max_length=400)
    bench_cmd: str = Field(min_length=1, max_length=400)
    metric_regex: str = Field(max_length=300)
    metric: str = Field(pattern=r"^[\w.]+$", max_length=40)
    direction: Literal["higher", "lower"]
    check_cmd: str = Field(max_length=400)
    notes: str = Field(max_length=1200)


def tree_context(repo: git.Repo, commit: str) -> tuple[list[str], dict[str, str]]:
    """The tree's file list and the texts a draft is made from (build files, READMEs, bench files)."""
    from kb import gitrepo

    files = gitrepo.list_files(repo, commit)
    wanted = [
        f
        for f in files
        if (f.count("/") <= 1 and PurePosixPath(f).name in _BUILD_FILES)
        or (f.count("/") == 0 and _README.fullmatch(f))
    ]
    benchy = [f for f in files if "bench" in f.lower() and f.count("/") <= 2][:6]
    return files, gitrepo.read_files(repo, commit, [*wanted[:12], *benchy])


def draft_spec(
    db: sqlite_utils.Database,
    llm: LLMSettings,
    repo: git.Repo,
    commit: str,
    *,
    model: str | None = None,
    api_base: str | None = None,
) -> tuple[ScriptDraft, int]:
    """Ask the model for a first draft (build, benchmark command, regex, checks); (draft, llm call)."""
    from runner.llm import client_for
    from runner.prompting import block, clip, new_nonce, rules

    files, texts = tree_context(repo, commit)
    nonce = new_nonce()
    listing = "\n".join(files[:300]) + (f"\n[... {len(files) - 300} more files]" if len(files) > 300 else "")
    blocks = [block(nonce, "file-list", listing, files=len(files))]
    blocks += [block(nonce, "file", clip(text, 6000), path=path) for path, text in texts.items()]
    system = (
        "You set up benchmarking for a tool that measures performance patches of a source tree. "
        "From the tree's file list, build files and README, propose: `build_cmd`, a shell command "
        "that builds the tree in its root (prefer its own build files, and build the benchmark "
        "program too); `bench_cmd`, a command run in the tree's root after the build that runs a "
        "benchmark for about one to ten seconds and prints its result; `metric_regex`, a Python "
        "regex matching the output line that holds the result, with exactly one capture group "
        "around the number (or named groups (?P<name>...) for several metrics), specific enough "
        "that it cannot take another number on that line; `metric`, the metric's name; "
        "`direction`, higher or lower is better; `check_cmd`, a command that exits non-zero when "
        "the program computes a wrong result (its tests), or empty; `notes`, what you assumed. "
        "Use only programs and files the tree has or builds. " + rules(nonce)
    )
    user = "\n\n".join(blocks) + "\n\nAnswer with the JSON object only."
    client = client_for(db, llm, model=model, api_base=api_base)

    def sane(draft: ScriptDraft) -> None:
        check_spec(BenchSpec(draft.bench_cmd, draft.metric_regex, draft.metric))

    def validate(draft: ScriptDraft) -> None:
        try:
            sane(draft)
        except UserError as exc:
            raise ValueError(str(exc)) from None

    answer = client.complete_structured(
        "draft_scripts",
        [{"role": "system", "content": system}, {"role": "user", "content": user}],
        ScriptDraft,
        validate=validate,
    )
    return answer.value, answer.call_id


# --- init's step ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaffoldRequest:
    """What `autoresearch init` was asked to scaffold."""

    bench_cmd: str | None = None
    metric_regex: str | None = None
    check_cmd: str | None = None
    samples: int = DEFAULT_SAMPLES
    draft: bool = False
    model: str | None = None
    api_base: str | None = None


def make_prepare(
    request: ScaffoldRequest, say: Callable[[str], None], confirm: Callable[[str], bool]
) -> Prepare:
    """init's step that writes the scripts the target lacks (and shows a model's draft first)."""

    def prepare(ws: Workspace, repo: git.Repo, commit: str, data: dict[str, Any]) -> Prepared:
        from kb import gitrepo

        return _prepare(request, say, confirm, ws, repo, commit, data, gitrepo.list_files(repo, commit))

    return prepare


def _prepare(
    request: ScaffoldRequest,
    say: Callable[[str], None],
    confirm: Callable[[str], bool],
    ws: Workspace,
    repo: git.Repo,
    commit: str,
    data: dict[str, Any],
    files: list[str],
) -> Prepared:
    target = dict(data.get("target", {}))
    metric = dict(data.get("metric", {}))
    bench_name = str(target.get("bench_script") or "autoresearch.sh")
    checks_name = str(target.get("checks_script") or "autoresearch.checks.sh")
    bench_cmd, regex, check_cmd = request.bench_cmd, request.metric_regex, request.check_cmd
    out = Prepared()
    if request.model or request.api_base:
        out.data["llm"] = {k: v for k, v in (("model", request.model), ("api_base", request.api_base)) if v}
    if request.draft:
        draft = _ask_draft(request, ws, repo, commit, data)
        say("A first draft from the model (nothing is written before you accept it):")
        for label, value in (
            ("build command", draft.build_cmd),
            ("benchmark", draft.bench_cmd),
            ("metric regex", draft.metric_regex or "(the command prints METRIC lines)"),
            ("metric", f"{draft.metric} ({draft.direction} is better)"),
            ("checks", draft.check_cmd or "(none)"),
            ("notes", draft.notes),
        ):
            say(f"  {label:13} {value}")
        # What the user gave on the command line wins over the draft.
        bench_cmd = bench_cmd or draft.bench_cmd
        regex = draft.metric_regex if regex is None and not request.bench_cmd else regex
        check_cmd = check_cmd if check_cmd is not None else (draft.check_cmd or None)
        target.setdefault("build_cmd", draft.build_cmd)
        metric.setdefault("primary", draft.metric)
        metric.setdefault("direction", draft.direction)
    if bench_cmd is None:
        if bench_name not in files and not (ws.root / bench_name).is_file():
            say(
                f"note: the target has no {bench_name}: write one into {ws.root} (README: Using it "
                "on your own project) or run init again with --bench-cmd; `autoresearch validate` checks it"
            )
    else:
        if bench_name in files:
            raise UserError(
                f"--bench-cmd: the target tree has its own {bench_name}; drop --bench-cmd to use it, "
                "or name another file with --bench-script"
            )
        spec = BenchSpec(bench_cmd, regex or "", str(metric.get("primary") or ""), request.samples)
        if not spec.metric:
            names = _group_names(spec.regex)
            spec = BenchSpec(bench_cmd, spec.regex, names[0] if names else "throughput", request.samples)
        names = check_spec(spec)
        if spec.regex and spec.metric not in names:
            raise UserError(f"--metric {spec.metric}: the regex yields {', '.join(names)}")
        metric["primary"] = spec.metric
        out.texts[bench_name] = bench_script(spec)
        if "direction" not in metric and reads_like_time(spec.metric):
            say(
                f"warning: {spec.metric!r} reads like a time but no --direction: higher is better by "
                'default; set metric.direction = "lower" in autoresearch.toml if smaller is better'
            )
    missing_checks = checks_name not in files and not (ws.root / checks_name).is_file()
    if missing_checks and (bench_cmd or check_cmd):
        out.texts[checks_name] = checks_script(check_cmd)
        if not check_cmd:
            say(
                f"warning: no --check-cmd: {checks_name} checks nothing, so a fast but wrong patch "
                "can be kept; give a command that fails on a wrong result (its tests)"
            )
    elif missing_checks:
        say(f"note: the target has no {checks_name}: run init again with --check-cmd, or write one")
    elif check_cmd:
        raise UserError(
            f"--check-cmd: the target tree has its own {checks_name}; drop --check-cmd to use it, "
            "or name another file with --checks-script"
        )
    if "build_cmd" not in target and not _MAKEFILES & set(files):
        from kb.config import TargetSettings

        default = TargetSettings.model_fields["build_cmd"].default
        say(
            f"warning: no --build-cmd, and the tree has no Makefile for the default `{default}`: "
            "every build would fail; set target.build_cmd in autoresearch.toml (`true` when "
            "nothing needs building), or run init again with --build-cmd"
        )
    harness = harness_paths([c for c in (bench_cmd, check_cmd) if c], files)
    protect = list(dict.fromkeys([*target.get("protect", []), *harness]))
    if harness:
        out.notes["target.protect"] = (
            f"{', '.join(harness)}: named by the benchmark or check command (init protects the harness)."
        )
    target["protect"] = protect
    out.data["target"] = target
    out.data["metric"] = metric
    if request.draft:
        shown = ", ".join(out.texts) or "no scripts"
        if not confirm(f"Write {shown} into {ws.root} and use these settings?"):
            raise UserError("the draft was declined; nothing was written (run init again with --bench-cmd)")
    return out


def _group_names(regex: str) -> list[str]:
    try:
        return list(re.compile(regex).groupindex)
    except re.error:
        return []


def _ask_draft(
    request: ScaffoldRequest, ws: Workspace, repo: git.Repo, commit: str, data: dict[str, Any]
) -> ScriptDraft:
    from kb.config import LLMSettings

    llm = LLMSettings.model_validate(data.get("llm", {}))
    db = ws.db()
    try:
        draft, _call = draft_spec(db, llm, repo, commit, model=request.model, api_base=request.api_base)
    finally:
        db.conn.close()
    return draft
