"""The bundled demo target (examples/demo): it builds with gcc, prints METRIC lines that parse,
passes its checks, and each fork commit does what the demo needs it to do: two independent,
stackable speedups, a neutral refactor, a wrong "speedup" the checks catch, a slowdown, and
a commit that edits the benchmark script.

Speed comparisons run in rounds: the baseline, every candidate (in an order that rotates from
round to round), the baseline again. A candidate's ratio in a round is its throughput over the
mean of the two baseline runs around it; the test compares the median ratio over the rounds,
so load from other processes cancels out.
"""

from __future__ import annotations

import html.parser
import importlib.util
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"
ROUNDS = 5  # speed rounds; each runs the benchmark 6 times, ~0.25 s each on an idle 2-core VM
METRIC_LINE = re.compile(r"^METRIC ([\w.µ]+)=(\S+)$")
FUSE_CALL = re.compile(r"demo_can_fuse\(\s*\w+\s*,\s*\w+\s*,\s*\(enum demo_op\[\]\)\{([^}]*)\}")
# The patches, by their role (see FORK_PATCHES in build_repos.py).
FUSION, LOOP_ORDER, NEUTRAL, WRONG, SLOWDOWN, CHEAT = range(6)


def _load_build_repos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_build_repos", DEMO / "build_repos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build_repos = _load_build_repos()


def _git_env() -> dict[str, str]:
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t.invalid")
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    return env


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env=_git_env(),
    ).stdout


def run(tree: Path, *cmd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd),
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


def parse_metrics(stdout: str) -> list[tuple[str, float]]:
    metrics = []
    for line in stdout.splitlines():
        if not line.startswith("METRIC"):
            continue
        match = METRIC_LINE.match(line)
        assert match, f"malformed METRIC line: {line!r}"
        value = float(match.group(2))
        assert math.isfinite(value), line
        metrics.append((match.group(1), value))
    return metrics


def throughput(tree: Path) -> float:
    proc = run(tree, "./autoresearch.sh")
    assert proc.returncode == 0, proc.stderr
    values = [v for name, v in parse_metrics(proc.stdout) if name == "throughput"]
    assert len(values) == 1, proc.stdout
    return values[0]


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    upstream, fork = build_repos.build(tmp_path_factory.mktemp("repos"))
    return Path(upstream), Path(fork)


@pytest.fixture(scope="module")
def fork_commits(repos: tuple[Path, Path]) -> list[str]:
    """The fork's commits on top of the baseline, oldest first."""
    _, fork = repos
    return git(fork, "rev-list", "--reverse", "HEAD~6..HEAD").split()


@pytest.fixture(scope="module")
def tree(
    repos: tuple[Path, Path], fork_commits: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Path]]:
    """tree(i, j, ...): a built copy of the baseline with fork commits i, j ... applied in
    that order (none: the baseline). Cached per module. A copy of the built baseline, so make
    recompiles only the files the commits change."""
    upstream, fork = repos
    built: dict[tuple[int, ...], Path] = {}

    def make(*commits: int) -> Path:
        if commits not in built:
            name = "base" if not commits else "with-" + "-".join(map(str, commits))
            path = tmp_path_factory.mktemp(name) / "tree"
            if commits:
                shutil.copytree(make(), path, symlinks=True)
            else:
                git(upstream.parent, "clone", "-q", str(upstream), str(path))
            for i in commits:
                patch = git(fork, "format-patch", "-1", "--stdout", fork_commits[i])
                git(path, "am", "-q", stdin=patch)
            proc = run(path, "make", "-j2")
            assert proc.returncode == 0, proc.stderr
            built[commits] = path
        return built[commits]

    yield make


SPEED_VARIANTS: tuple[tuple[int, ...], ...] = (
    (FUSION,),
    (LOOP_ORDER,),
    (FUSION, LOOP_ORDER),
    (SLOWDOWN,),
)


@pytest.fixture(scope="module")
def speed(tree: Callable[..., Path]) -> dict[tuple[int, ...], float]:
    """Median throughput ratio (candidate / baseline) of each variant over ROUNDS rounds."""
    base = tree()
    paths = [tree(*v) for v in SPEED_VARIANTS]
    ratios: dict[tuple[int, ...], list[float]] = {v: [] for v in SPEED_VARIANTS}
    for r in range(ROUNDS):
        order = list(range(len(paths)))
        order = order[r % len(order) :] + order[: r % len(order)]
        before = throughput(base)
        measured = {i: throughput(paths[i]) for i in order}
        baseline = (before + throughput(base)) / 2
        for i, variant in enumerate(SPEED_VARIANTS):
            ratios[variant].append(measured[i] / baseline)
    medians = {v: statistics.median(rs) for v, rs in ratios.items()}
    print(
        f"\nthroughput ratios vs baseline, median of {ROUNDS} rounds: "
        + ", ".join(f"{'+'.join(map(str, v))}: {m:.3f}" for v, m in medians.items())
    )
    return medians


def test_build_is_reproducible_and_fork_has_every_kind_of_commit(
    repos: tuple[Path, Path], fork_commits: list[str], tmp_path: Path
) -> None:
    upstream, fork = repos
    again_upstream, again_fork = build_repos.build(tmp_path)
    assert git(again_upstream, "rev-parse", "HEAD") == git(upstream, "rev-parse", "HEAD")
    assert git(again_fork, "rev-parse", "HEAD") == git(fork, "rev-parse", "HEAD")
    assert git(upstream, "rev-list", "--count", "HEAD").strip() == "1"
    subjects = git(fork, "log", "--reverse", "--format=%s", "HEAD~6..HEAD").splitlines()
    assert subjects == [p.subject for p in build_repos.FORK_PATCHES]
    # The scripts are executable in the repository, not only on this disk.
    modes = git(upstream, "ls-files", "-s", "autoresearch.sh", "autoresearch.checks.sh")
    assert [line.split()[0] for line in modes.splitlines()] == ["100755", "100755"]
    assert not (upstream / "bench").exists() and not (upstream / "build").exists()


def test_build_refuses_a_used_destination(repos: tuple[Path, Path]) -> None:
    upstream, _ = repos
    with pytest.raises(build_repos.DemoRepoError, match="already exists"):
        build_repos.build(upstream.parent)


def test_metric_lines_parse(tree: Callable[..., Path]) -> None:
    base = tree()
    proc = run(base, "./autoresearch.sh")
    assert proc.returncode == 0, proc.stderr
    metrics = dict(parse_metrics(proc.stdout))
    assert set(metrics) == {
        "throughput",
        "graph_ms",
        "wall_ms",
        "rmsnorm_ms",
        "matvec_ms",
        "softmax_ms",
        "achieved_gbs",
        "bytes_per_iter",
        "mem_bw_gbs",
    }
    assert metrics["throughput"] == pytest.approx(1000 / metrics["graph_ms"], rel=1e-3)
    # Per-op medians come from different iterations than the total's: allow some slack.
    stages = metrics["rmsnorm_ms"] + metrics["matvec_ms"] + metrics["softmax_ms"]
    assert 0.5 * metrics["graph_ms"] <= stages <= 1.2 * metrics["graph_ms"]
    # RMS_NORM and MUL: 4 x 24 MiB + the weight row (8 KiB); GET_ROWS: 2 x 8 KiB; MUL_MAT:
    # the 6144 x 2048 Q8_0 matrix (36 bytes per 32 weights), the row and the logits (24 KiB);
    # ADD and SOFT_MAX: 3 x 24 KiB each.
    assert metrics["bytes_per_iter"] == (
        4 * 24 * 2**20 + 8192 + 2 * 8192 + 6144 * 64 * 36 + 8192 + 24576 + 6 * 24576
    )
    assert metrics["mem_bw_gbs"] > 0

    # BENCH_REPS=N prints N samples; bytes_per_iter and mem_bw_gbs once.
    proc = run(base, "./autoresearch.sh", env={"BENCH_REPS": "3", "BENCH_ITERS": "2"})
    names = [name for name, _ in parse_metrics(proc.stdout)]
    assert names.count("throughput") == 3 and names.count("mem_bw_gbs") == 1


def test_checks_pass_on_the_baseline(tree: Callable[..., Path]) -> None:
    proc = run(tree(), "./autoresearch.checks.sh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^checks: \d+ passed, 0 failed$", proc.stdout, re.M)
    for op in ("RMS_NORM", "MUL", "MUL_MAT", "SOFT_MAX", "RMS_NORM+MUL", "graph:probs"):
        assert re.search(rf"^check cpu +{re.escape(op)} .* ok ", proc.stdout, re.M), op


def fusions(path: Path) -> set[str]:
    found = set()
    for match in FUSE_CALL.finditer(path.read_text()):
        found.add("+".join(op.strip().removeprefix("OP_") for op in match.group(1).split(",")))
    return found


def test_backends_show_a_fusion_gap(tree: Callable[..., Path]) -> None:
    cpu = DEMO / "target/src/backend-cpu/cpu-backend.c"
    accel = DEMO / "target/src/backend-accel/accel-backend.c"
    assert fusions(cpu) == {"MUL_MAT+ADD"}
    assert fusions(accel) == {"RMS_NORM+MUL", "MUL_MAT+ADD"}
    assert fusions(tree(FUSION) / "src/backend-cpu/cpu-backend.c") == fusions(accel)


def test_fusion_and_loop_order_pass_checks_alone_and_stacked(tree: Callable[..., Path]) -> None:
    for commits in ((FUSION,), (LOOP_ORDER,), (FUSION, LOOP_ORDER), (LOOP_ORDER, FUSION)):
        proc = run(tree(*commits), "./autoresearch.checks.sh")
        assert proc.returncode == 0, (commits, proc.stdout + proc.stderr)


def test_fusion_and_loop_order_are_real_stackable_speedups(
    speed: dict[tuple[int, ...], float],
) -> None:
    fused, loop_order = speed[(FUSION,)], speed[(LOOP_ORDER,)]
    assert fused > 1.05
    assert loop_order > 1.05
    assert speed[(FUSION, LOOP_ORDER)] > 1.05 * max(fused, loop_order)


def test_neutral_refactor_passes_and_changes_no_code(tree: Callable[..., Path]) -> None:
    base, neutral = tree(), tree(NEUTRAL)
    assert run(neutral, "./autoresearch.checks.sh").returncode == 0
    obj = "build/src/backend-cpu/ops-elementwise.o"
    text = [
        run(t, "objcopy", "-O", "binary", "--only-section=.text", obj, "text.bin") for t in (base, neutral)
    ]
    assert all(p.returncode == 0 for p in text), text
    assert (base / "text.bin").read_bytes() == (neutral / "text.bin").read_bytes()


def test_wrong_speedup_fails_the_checks_naming_the_op(tree: Callable[..., Path]) -> None:
    proc = run(tree(WRONG), "./autoresearch.checks.sh")
    assert proc.returncode != 0
    assert "cpu SOFT_MAX" in proc.stderr
    assert re.search(r"^check cpu +SOFT_MAX .* FAIL ", proc.stdout, re.M)
    assert re.search(r"^check cpu +RMS_NORM .* ok ", proc.stdout, re.M)


def test_slowdown_passes_checks_and_is_slower(
    tree: Callable[..., Path], speed: dict[tuple[int, ...], float]
) -> None:
    assert run(tree(SLOWDOWN), "./autoresearch.checks.sh").returncode == 0
    assert speed[(SLOWDOWN,)] < 0.95


def test_cheat_edits_only_the_benchmark_script(repos: tuple[Path, Path], fork_commits: list[str]) -> None:
    _, fork = repos
    touched = git(fork, "show", "--name-only", "--format=", fork_commits[CHEAT]).split()
    assert touched == ["autoresearch.sh"]
    # No other fork commit touches the protected scripts.
    for i, sha in enumerate(fork_commits):
        if i != CHEAT:
            files = git(fork, "show", "--name-only", "--format=", sha).split()
            assert not {"autoresearch.sh", "autoresearch.checks.sh"} & set(files), files


def test_other_commits_still_apply_once_the_winners_are_kept(
    tree: Callable[..., Path], repos: tuple[Path, Path], fork_commits: list[str]
) -> None:
    # A later wave applies candidates onto baseline + winners; these must not conflict.
    _, fork = repos
    winners = tree(FUSION, LOOP_ORDER)
    for extra in (NEUTRAL, WRONG, SLOWDOWN, CHEAT):
        patch = git(fork, "format-patch", "-1", "--stdout", fork_commits[extra])
        git(winners, "apply", "--check", "-", stdin=patch)


class _ArticleParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.meta: dict[str, str] = {}
        self.canonical = ""
        self.lang = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if tag == "html":
            self.lang = a.get("lang", "")
        if tag == "meta" and ("name" in a or "property" in a):
            self.meta[a.get("name") or a["property"]] = a.get("content", "")
        if tag == "link" and a.get("rel") == "canonical":
            self.canonical = a.get("href", "")


def test_articles_are_complete_pages() -> None:
    pages = sorted((DEMO / "articles").glob("*.html"))
    assert 3 <= len(pages) <= 4
    langs = []
    for page in pages:
        parser = _ArticleParser()
        parser.feed(page.read_text(encoding="utf-8"))
        assert {"nav", "aside", "footer", "article", "h1", "h2", "pre", "code"} <= parser.tags
        assert parser.meta.get("author") and parser.meta.get("article:published_time"), page
        assert parser.canonical.startswith("https://"), page
        langs.append(parser.lang)
    assert "ru" in langs
    fusion = (DEMO / "articles").joinpath("fusing-rms-norm-mul.html").read_text()
    for ident in ("demo_can_fuse", "rms_norm_mul_fused", "_mm256_fmadd_ps"):
        assert ident in fusion
