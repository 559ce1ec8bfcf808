"""TUI cold start and fleet refresh on a big workspace database.

    .venv/bin/python benchmarks/bench_tui.py [--passages 100000] [--experiments 10000] [--db DIR]

Builds a workspace database (or reuses DIR/autoresearch.db when it holds that many rows) with
PASSAGES paper passages (500 papers), EXPERIMENTS experiments in one live run (waves of 100, a
decision each, samples for the latest 400, 8 workers with running experiments and growing logs),
then measures, each in a fresh process running the real app headless:

- cold start per pane: process start -> first paint of the screen, and -> its first data shown
  (the goal: first paint < 1 s);
- the fleet pane under a live run: a writer process plays the runner (heartbeats, phases, samples,
  log lines) while the app refreshes the pane on its own (data_version poll + 1 s tick): the time
  from asking for a refresh to the pane painted with it, and the query part of it.

With `--queue DIR` it measures the Hypotheses pane on a queue of mined hypotheses instead (DIR: a
folder `benchmarks/bench_queue.py --db DIR` built, or builds it with `--hypotheses N`, default
10,000): cold start to the first page, then the time per page from the key (`]`, `[`) to the page
shown, a change of order (`o`) and a filter typed into the bar.

Prints figures; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.db import connect, transaction  # noqa: E402

WORDS = [
    "cache",
    "tile",
    "kernel",
    "bandwidth",
    "memory",
    "matrix",
    "vector",
    "quantize",
    "fuse",
    "norm",
    "softmax",
    "attention",
    "prefetch",
    "thread",
    "core",
    "latency",
    "throughput",
    "decode",
    "prompt",
    "batch",
    "weight",
    "activation",
    "layer",
    "register",
    "simd",
    "avx",
]
VERDICTS = {"kept": "keep", "discarded": "discard"}
STATUSES = ["kept", "discarded", "inconclusive", "inconclusive", "discarded", "crashed", "checks_failed"]


def build(root: Path, passages: int, experiments: int, seed: int = 11) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    db = connect(root / "autoresearch.db")
    t = time.time() - 86_400
    papers = 500
    with transaction(db):
        for p in range(papers):
            source = db.execute(
                "INSERT INTO sources (kind, title, canonical_url, site, published, created_at, updated_at) "
                "VALUES ('paper', ?, ?, 'example.org', ?, ?, ?)",
                [
                    f"Paper {p}: {' '.join(rng.choices(WORDS, k=5))}",
                    f"bench://{p}",
                    f"2025-{p % 12 + 1:02d}-01",
                    t,
                    t,
                ],
            ).lastrowid
            per = passages // papers + (1 if p < passages % papers else 0)
            db.conn.executemany(
                "INSERT INTO evidence (source_id, kind, ref, title, section, position, body, created_at) "
                "VALUES (?, 'passage', ?, ?, ?, ?, ?, ?)",
                [
                    (
                        source,
                        str(i),
                        f"Paper {p}",
                        f"Section {i // 20}",
                        i,
                        " ".join(rng.choices(WORDS, k=60)),
                        t,
                    )
                    for i in range(per)
                ],
            )
        hyps = max(1, experiments // 5)
        db.conn.executemany(
            "INSERT INTO hypotheses (title, rationale, expected_effect, priority, status, origin, "
            "created_at, "
            "updated_at) VALUES (?, 'bench', 0.02, ?, 'patched', 'llm', ?, ?)",
            [
                (f"Hypothesis {h}: {' '.join(rng.choices(WORDS, k=4))}", rng.random() * 10, t, t)
                for h in range(hyps)
            ],
        )
        run = db.execute(
            "INSERT INTO runs (name, status, backend, policy, pid, host, started_at, heartbeat_at) "
            "VALUES ('bench', 'running', 'local', ?, ?, 'bench', ?, ?)",
            [json.dumps({"metric": "tg", "direction": "higher"}), os.getpid(), t, time.time()],
        ).lastrowid
        workers = [
            db.execute(
                "INSERT INTO workers (run_id, name, backend, status, noise, started_at) "
                "VALUES (?, ?, 'local', 'busy', 0.01, ?)",
                [run, f"local-{w}", t],
            ).lastrowid
            for w in range(8)
        ]
        logs = root / "logs" / "bench"
        wave_id = 0
        for e in range(experiments):
            if e % 100 == 0:
                wave_id = db.execute(
                    "INSERT INTO waves (run_id, number, baseline_commit, status, started_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [run, e // 100 + 1, "0" * 40, "finished", t + e],
                ).lastrowid
            live = e >= experiments - 8
            status = "running" if live else STATUSES[e % len(STATUSES)]
            folder = logs / f"e{e}"
            eid = db.execute(
                "INSERT INTO experiments (run_id, wave_id, hypothesis_id, kind, title, status, phase, "
                "worker_id, log_dir, created_at, started_at, ended_at) "
                "VALUES (?, ?, ?, 'candidate', ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    run, wave_id, e % hyps + 1, f"Experiment {e}", status, "bench" if live else None,
                    workers[e % 8], str(folder), t + e, t + e, None if live else t + e + 30,
                ],
            ).lastrowid  # fmt: skip
            effect = rng.gauss(0.0, 0.02)
            db.execute(
                "INSERT INTO decisions (experiment_id, verdict, metric, effect, ci_low, ci_high, pairs, "
                "is_final, "
                "created_at) VALUES (?, ?, 'tg', ?, ?, ?, 16, ?, ?)",
                [eid, "continue" if live else VERDICTS.get(status, "inconclusive"),
                 effect, effect - 0.01, effect + 0.01, 0 if live else 1, t + e],
            )  # fmt: skip
            if e >= experiments - 400:
                db.conn.executemany(
                    "INSERT INTO samples (experiment_id, pair, side, metric, seq, value, created_at) "
                    "VALUES (?, ?, ?, 'tg', 0, ?, ?)",
                    [
                        (eid, pair, side, 41.0 * (1 + (effect if side == "B" else 0) + rng.gauss(0, 0.01)), t)
                        for pair in range(16)
                        for side in ("A", "B")
                    ],
                )
            if live:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "batch-0.log").write_text("".join(f"setup line {i}\n" for i in range(200)))
    db.execute("INSERT INTO evidence_fts (evidence_fts) VALUES ('optimize')")
    db.conn.close()


CHILD = textwrap.dedent(
    """
    import time
    T0 = time.perf_counter()
    WALL0 = time.time()
    import json, sys
    sys.path.insert(0, {root!r})
    from tui.app import make_app
    imported = time.perf_counter() - T0
    app = make_app({ws!r}, pane={pane!r})
    marks = {{}}

    async def measure(pilot):
        deadline = time.perf_counter() + {seconds}
        while time.perf_counter() < deadline:
            if app.first_paint is not None and "paint" not in marks:
                marks["paint"] = app.first_paint - T0
            if "paint" in marks and "data" not in marks and app.screen.is_loaded():
                marks["data"] = time.perf_counter() - T0
                if not {follow}:
                    break
            await pilot.pause(0.002)
        screen = app.screen
        if {follow}:
            marks["refresh"] = getattr(screen, "refresh_times", [])
            marks["query"] = getattr(screen, "query_times", [])
        marks["imported"] = imported
        marks["wall0"] = WALL0
        print("RESULT " + json.dumps(marks), flush=True)
        app.exit()

    app.run(headless=True, size=(120, 40), auto_pilot=measure)
    """
)

WRITER = textwrap.dedent(
    """
    import sys, time, random, os
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from kb.db import connect, transaction
    db = connect(Path({ws!r}) / "autoresearch.db")
    live = [r[0] for r in db.execute("SELECT id FROM experiments WHERE status = 'running'")]
    folders = dict(db.execute("SELECT id, log_dir FROM experiments WHERE status = 'running'").fetchall())
    rng = random.Random(3)
    pair = db.execute("SELECT coalesce(max(pair), 0) + 1 FROM samples").fetchone()[0]
    phases = ["setup", "build", "bench", "checks"]
    end = time.time() + {seconds}
    while time.time() < end:
        with transaction(db):
            db.execute("UPDATE runs SET heartbeat_at = ? WHERE name = 'bench'", [time.time()])
            for eid in live:
                db.execute("UPDATE experiments SET phase = ? WHERE id = ?", [rng.choice(phases), eid])
                for side in ("A", "B"):
                    db.execute(
                        "INSERT INTO samples (experiment_id, pair, side, metric, seq, value, created_at) "
                        "VALUES (?, ?, ?, 'tg', 0, ?, ?)",
                        [eid, pair, side, 41.0 + rng.random(), time.time()])
        pair += 1
        for eid in live:
            with open(Path(folders[eid]) / "batch-0.log", "a") as fh:
                fh.write(f"METRIC tg={{41 + rng.random():.3f}}\\n")
        time.sleep(0.1)
    """
)


QUEUE_CHILD = textwrap.dedent(
    """
    import time
    T0 = time.perf_counter()
    import json, sys
    sys.path.insert(0, {root!r})
    from tui.app import make_app
    from tui.screens.hypotheses import HypothesesScreen
    from tui.widgets.common import PagedTable
    app = make_app({ws!r}, pane="hypotheses", poll_interval=None, fleet_interval=None)
    marks = {{"pages": [], "back": []}}
    # Inside the app: from the key's action (a page asked for) to the screen refreshed with the page.
    asked, painted = [], []
    for name in ("action_next_page", "action_previous_page"):
        original = getattr(PagedTable, name)
        def wrapped(self, _original=original):
            asked.append(time.perf_counter())
            return _original(self)
        setattr(PagedTable, name, wrapped)
    cycle = HypothesesScreen.action_cycle_sort
    def action_cycle_sort(self):
        asked.append(time.perf_counter())
        return cycle(self)
    HypothesesScreen.action_cycle_sort = action_cycle_sort
    shown = HypothesesScreen.on_page_loaded
    def on_page_loaded(self, message):
        shown(self, message)
        self.call_after_refresh(lambda: painted.append(time.perf_counter()))
    HypothesesScreen.on_page_loaded = on_page_loaded

    async def idle(pilot, table, done, start):
        start = start or time.perf_counter()
        while not done():
            await pilot.pause(0.001)
            if time.perf_counter() - start > 30:
                raise SystemExit("timed out")
        return (time.perf_counter() - start) * 1000

    async def measure(pilot):
        while not app.screen.is_loaded():
            await pilot.pause(0.002)
        marks["data"] = time.perf_counter() - T0
        table = app.screen.query_one("#hyp-table", PagedTable)
        table.focus()
        size = table.page_limit
        for n in range({pages}):
            want = (n + 1) * size
            count = len(painted)
            await pilot.press("right_square_bracket")
            await idle(pilot, table, lambda: table.page_offset == want and len(painted) > count, 0)
            marks["pages"].append((painted[-1] - asked[-1]) * 1000)
        for n in range({pages}):
            want = ({pages} - n - 1) * size
            count = len(painted)
            await pilot.press("left_square_bracket")
            await idle(pilot, table, lambda: table.page_offset == want and len(painted) > count, 0)
            marks["back"].append((painted[-1] - asked[-1]) * 1000)
        count = len(painted)
        await pilot.press("o")
        await idle(pilot, table, lambda: "by priority" in str(table.border_title) and len(painted) > count, 0)
        marks["order"] = (painted[-1] - asked[-1]) * 1000
        await pilot.press("o", "o", "o")
        await idle(pilot, table, lambda: "by rank" in str(table.border_title), time.perf_counter())
        await pilot.press("f", *"backend:cpu vectorise")
        t = time.perf_counter()  # the last key typed: the debounce (0.25 s), the query, the paint
        marks["filter"] = await idle(pilot, table, lambda: "search vectorise" in str(table.border_title), t)
        marks["filtered_total"] = table.page_total
        marks["total"] = size
        print("RESULT " + json.dumps(marks), flush=True)
        app.exit()

    app.run(headless=True, size=(120, 40), auto_pilot=measure)
    """
)


def queue_case(folder: Path, hypotheses: int, pages: int, repeat: int) -> None:
    """The Hypotheses pane on a mined queue: cold start, ms per page, order and filter changes."""
    ws = folder / "ws"
    if not (ws / "autoresearch.db").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "bench_queue.py"), "--db", str(folder),
             "--hypotheses", str(hypotheses), "--repeat", "1"],
            check=True, cwd=ROOT,
        )  # fmt: skip
    db = connect(ws / "autoresearch.db")
    total = db.execute("SELECT count(*) FROM hypotheses").fetchone()[0]
    db.conn.close()
    runs = []
    for _ in range(repeat):
        code = QUEUE_CHILD.format(root=str(ROOT), ws=str(ws), pages=pages)
        spawned = time.time()
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
        )
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(
                f"the app did not report ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
            )
        marks = json.loads(line[7:])
        marks["spawned"] = time.time() - spawned
        runs.append(marks)
    pages_ms = sorted(x for r in runs for x in r["pages"] + r["back"])
    print(f"hypotheses pane, {total:,} hypotheses (headless, 120x40, pages of {runs[0]['total']} rows), "
          f"{repeat} runs of {pages} pages forward and back:")  # fmt: skip
    print(
        f"  cold start to the first page: median {statistics.median(r['data'] for r in runs) * 1000:.0f} ms"
    )
    p95 = pages_ms[int(0.95 * (len(pages_ms) - 1))]
    print(f"  per page (its key to the page painted, in the app): p50 {statistics.median(pages_ms):.0f} ms, "
          f"p95 {p95:.0f} ms, max {pages_ms[-1]:.0f} ms ({len(pages_ms)} pages)")  # fmt: skip
    print(f"  change of order (o): median {statistics.median(r['order'] for r in runs):.0f} ms")
    filtered = statistics.median(r["filter"] for r in runs)
    print(f"  filter bar: last key typed to the filtered page (a 0.25 s debounce in it): median "
          f"{filtered:.0f} ms ({runs[0]['filtered_total']:,} match)")  # fmt: skip


def child(ws: Path, pane: str, *, follow: bool = False, seconds: float = 15.0) -> dict[str, object]:
    code = CHILD.format(root=str(ROOT), ws=str(ws), pane=pane, seconds=seconds, follow=follow)
    spawned = time.time()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=seconds + 60
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"the app did not report ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    marks: dict[str, object] = json.loads(line[7:])
    marks["startup"] = float(marks["wall0"]) - spawned  # type: ignore[arg-type]
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--db", type=Path, help="workspace folder to build or reuse (default: temporary)")
    parser.add_argument("--repeat", type=int, default=3, help="cold starts per pane")
    parser.add_argument("--live-seconds", type=float, default=12.0)
    parser.add_argument("--queue", type=Path, help="measure the Hypotheses pane on a mined queue in DIR")
    parser.add_argument("--hypotheses", type=int, default=10_000, help="with --queue: its size when built")
    parser.add_argument("--pages", type=int, default=10, help="with --queue: pages forward (and back)")
    args = parser.parse_args()
    if args.queue is not None:
        queue_case(args.queue, args.hypotheses, args.pages, args.repeat)
        return
    tmp = tempfile.TemporaryDirectory() if args.db is None else None
    ws = args.db or Path(tmp.name) / "ws"  # type: ignore[union-attr]
    have = (0, 0)
    if (ws / "autoresearch.db").exists():
        db = connect(ws / "autoresearch.db")
        have = (
            db.execute("SELECT count(*) FROM evidence WHERE kind = 'passage'").fetchone()[0],
            db.execute("SELECT count(*) FROM experiments").fetchone()[0],
        )
        db.conn.close()
    if have != (args.passages, args.experiments):
        if have != (0, 0):
            sys.exit(f"{ws}: holds {have[0]} passages and {have[1]} experiments; give another --db")
        started = time.perf_counter()
        build(ws, args.passages, args.experiments)
        print(f"built {args.passages} passages, {args.experiments} experiments in "
              f"{time.perf_counter() - started:.1f} s ({ws})")  # fmt: skip
    size = (ws / "autoresearch.db").stat().st_size / 1e6
    print(f"cold start (headless, 120x40), {args.passages:,} passages, {args.experiments:,} experiments, "
          f"{size:.0f} MB database; best and median of {args.repeat}")  # fmt: skip
    for pane in ("fleet", "knowledge", "hypotheses", "history"):
        runs = [child(ws, pane) for _ in range(args.repeat)]
        paint = [float(r["startup"]) + float(r["paint"]) for r in runs]  # type: ignore[arg-type]
        data = [float(r["startup"]) + float(r["data"]) for r in runs]  # type: ignore[arg-type]
        imported = [float(r["imported"]) for r in runs]  # type: ignore[arg-type]
        print(
            f"  {pane:11} first paint {min(paint) * 1000:6.0f} ms "
            f"(median {statistics.median(paint) * 1000:5.0f})"
            f"   data shown {min(data) * 1000:6.0f} ms (median {statistics.median(data) * 1000:5.0f})"
            f"   of which imports {statistics.median(imported) * 1000:4.0f} ms"
        )
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=str(ROOT), ws=str(ws), seconds=args.live_seconds + 10)],
        cwd=ROOT,
    )
    try:
        time.sleep(0.5)
        marks = child(ws, "fleet", follow=True, seconds=args.live_seconds)
    finally:
        writer.terminate()
        writer.wait(10)
    # The first refresh is the cold one (it opens the database): counted in "data shown" above.
    refresh = [float(x) * 1000 for x in marks["refresh"]][1:]  # type: ignore[attr-defined]
    query = [float(x) * 1000 for x in marks["query"]][1:]  # type: ignore[attr-defined]
    if refresh:
        refresh.sort()
        print(
            f"fleet pane under a live run ({len(refresh)} refreshes in {args.live_seconds:.0f} s, "
            f"writer every 0.1 s): refresh p50 {statistics.median(refresh):.1f} ms, "
            f"p95 {refresh[int(0.95 * (len(refresh) - 1))]:.1f} ms, "
            f"max {refresh[-1]:.1f} ms; of which query p50 {statistics.median(query):.1f} ms"
        )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
