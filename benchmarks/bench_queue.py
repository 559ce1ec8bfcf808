"""Ranking and listing the hypothesis queue at 10,000 hypotheses.

    .venv/bin/python benchmarks/bench_queue.py [--hypotheses 10000] [--db DIR] [--repeat 7]

Builds (or reuses DIR) a workspace whose fork has about 11,000 commits (tests/runner/queue_support.py:
real repositories written with `git fast-import`, a real `kb add-fork`, a real `hypotheses mine`),
so the queue holds HYPOTHESES mined fork-commit hypotheses with patches, evidence, claims and
families; then times, best and median of REPEAT runs each:

- `rerank` of the whole queue (every rank and family computed and stored, one transaction);
- one page (50 rows) of the queue: first, middle and last page, each sort, and filtered (status,
  backend, path, search words, outcome), through kb.store.queue.queue_page (what the CLI and the
  TUI call);
- `runnable()` (the runner's next wave, in the queue order) and `hypotheses list` through the CLI.

Prints figures; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(root: Path, hypotheses: int) -> Path:
    """A mined workspace of about `hypotheses` fork-commit hypotheses (the proportions of the tests)."""
    from kb.forks import add_fork
    from runner.research.miners import mine
    from tests.runner.queue_support import build_queue_repos, queue_workspace

    scale = hypotheses / 5000
    started = time.perf_counter()
    repos = build_queue_repos(
        root / "repos",
        cpu_functions=int(3600 * scale),
        seconds=int(1200 * scale),
        core=int(100 * scale),
        model=int(100 * scale),
        cuda=int(300 * scale),
        docs=int(100 * scale),
        server=int(50 * scale),
        build=int(50 * scale),
        hard=int(40 * scale),
        soft=int(40 * scale),
    )
    built = time.perf_counter()
    ws = queue_workspace(root / "ws", repos)
    db = ws.db()
    result = add_fork(ws, db, "fast", str(repos.fork))
    forked = time.perf_counter()
    report = mine(ws, db)
    mined = time.perf_counter()
    print(
        f"built {result.commits} fork commits in {built - started:.1f} s; add-fork {forked - built:.1f} s; "
        f"mine {mined - forked:.1f} s: {len(report.added['fork'])} queued "
        f"({len(report.details['rebased'])} rebased by a three-way merge, "
        f"{len(report.details['needs_port'])} needs_port), left out {sum(report.left_out.values())}"
    )
    db.conn.close()
    return root / "ws"


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    times, value = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - t) * 1000)
    return min(times), statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypotheses", type=int, default=10_000)
    parser.add_argument("--db", type=Path, help="workspace folder to build or reuse (default: temporary)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    from click.testing import CliRunner

    from kb.store.queue import QueueFilter, queue_page
    from kb.workspace import Workspace
    from runner.hypotheses import runnable
    from runner.rank import rerank
    from tui.cli import main as cli

    tmp = tempfile.TemporaryDirectory() if args.db is None else None
    root = args.db or Path(tmp.name)  # type: ignore[union-attr]
    ws_root = root / "ws"
    if not (ws_root / "autoresearch.db").exists():
        build(root, args.hypotheses)
    ws = Workspace(ws_root)
    db = ws.db()
    total = db.execute("SELECT count(*) FROM hypotheses").fetchone()[0]
    size = (ws_root / "autoresearch.db").stat().st_size / 1e6
    print(f"queue of {total:,} hypotheses ({size:.0f} MB database); ms, best and median of {args.repeat}")

    def show(label: str, fn: Callable[[], Any], note: Callable[[Any], str] = lambda _: "") -> None:
        best, median, value = timed(fn, args.repeat)
        print(f"  {label:44} {best:8.1f} {median:8.1f}  {note(value)}")

    show("rerank (every rank and family, stored)", lambda: rerank(ws, db),
         lambda r: f"{r.families} families, {r.in_families} in them")  # fmt: skip
    last = max(0, total - 50)
    for label, flt, offset in (
        ("page 1, by rank", QueueFilter(), 0),
        ("page at the middle, by rank", QueueFilter(), total // 2),
        ("last page, by rank", QueueFilter(), last),
        ("page 1, by priority", QueueFilter(sort="priority"), 0),
        ("page 1, by recent", QueueFilter(sort="recent"), 0),
        ("page 1, by effect", QueueFilter(sort="effect"), 0),
        ("status needs_port", QueueFilter(status="needs_port"), 0),
        ("backend cpu", QueueFilter(backend="cpu"), 0),
        ("path ggml/src/ggml-cpu/", QueueFilter(path="ggml/src/ggml-cpu/"), 0),
        ("search 'vectorise' (title, evidence)", QueueFilter(search="vectorise"), 0),
        ("search 'TG 12% faster' (evidence)", QueueFilter(search="TG 12% faster"), 0),
        ("outcome none", QueueFilter(outcome="none"), 0),
        ("backend cpu + path + search + status", QueueFilter(status="proposed", backend="cpu",
                                                            path="ggml/src/ggml-cpu/", search="unroll"), 0),
    ):  # fmt: skip
        show(label, lambda flt=flt, offset=offset: queue_page(db, flt, offset=offset, limit=50),
             lambda p: f"{p.total:,} match")  # fmt: skip
    show("runnable() (the next wave's order)", lambda: runnable(db, require_approval=False),
         lambda r: f"{len(r):,} patches")  # fmt: skip
    runner = CliRunner()
    show("CLI `hypotheses list` (50 rows, in process)",
         lambda: runner.invoke(cli, ["-w", str(ws_root), "hypotheses", "list"]).exit_code,
         lambda code: f"exit {code}")  # fmt: skip
    show("CLI `hypotheses list --json` (all rows)",
         lambda: len(runner.invoke(cli, ["-w", str(ws_root), "hypotheses", "list", "--json"]).output),
         lambda n: f"{n / 1e6:.1f} MB of JSON")  # fmt: skip
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
