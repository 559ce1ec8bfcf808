"""Search latency at 100,000 passages (`kb search ... --limit 20`): p50/p95 per query kind.

    .venv/bin/python benchmarks/bench_search.py [--passages 100000] [--db PATH] [--repeat 200]

Builds a synthetic knowledge base (Zipf-distributed vocabulary, a few code identifiers, word forms,
English and Russian text) in a temporary database (or reuses --db if it already holds that many
passages), then times `kb.search.search()` for a rare code identifier, a two-word phrase, a very
common word, and the queries the word-form index answers: an English word form, an identifier's
part, a Russian word form (exact hits first, then the word-form index fills the limit).
Goals (issues 3, 16): p95 <= 10 ms, <= 10 ms, <= 50 ms. Prints figures; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb.db import connect, now, transaction  # noqa: E402
from kb.search import fts_query, search, stem_query  # noqa: E402

QUERIES = {
    "rare identifier": "ggml_can_fuse",
    "two-word phrase": '"memory bandwidth"',
    "common word": "the",
    "word form": "repacking",
    "identifier part": "rms_norm",
    "russian form": "умножение",
}


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(size * 2)}
    return sorted(words)[:size]


def build(db_path: Path, passages: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    vocab = _vocabulary(rng, 20_000)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    russian = ["оптимизация", "ядра", "матричного", "умножения", "пропускная", "способность", "памяти"]
    db = connect(db_path)
    created = now()
    with transaction(db):
        cursor = db.execute(
            "INSERT INTO sources (kind, title, canonical_url, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
            ["paper", "synthetic corpus", f"synthetic://{passages}", created, created],
        )
        source_id = cursor.lastrowid
        batch: list[tuple[object, ...]] = []
        for position in range(passages):
            words = rng.choices(vocab, weights, k=110)
            for _ in range(4):
                words.insert(rng.randrange(len(words)), "the")
            if position % 5000 == 0:
                words.insert(rng.randrange(len(words)), "ggml_can_fuse")
            if position % 200 == 0:
                at = rng.randrange(len(words))
                words[at:at] = ["memory", "bandwidth"]
            if position % 50 == 0:
                words.insert(rng.randrange(len(words)), "memory")
            if position % 70 == 0:
                words.insert(rng.randrange(len(words)), "bandwidth")
            if position % 10 == 0:
                words.extend(rng.choices(russian, k=8))
            if position % 300 == 0:
                words.insert(rng.randrange(len(words)), rng.choice(["repack", "repacked", "repacks"]))
            if position % 4000 == 0:
                words.insert(rng.randrange(len(words)), "ggml_compute_forward_rms_norm")
            if position % 700 == 0:
                words.insert(rng.randrange(len(words)), rng.choice(["умножение", "умножением", "умножений"]))
            batch.append(
                (
                    source_id,
                    "passage",
                    str(position + 1),
                    "Synthetic paper",
                    f"Section {position % 37}",
                    position + 1,
                    " ".join(words),
                    created,
                )
            )
            if len(batch) == 5000:
                db.conn.executemany(
                    "INSERT INTO evidence (source_id, kind, ref, title, section, position, body, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    batch,
                )
                batch.clear()
        if batch:
            db.conn.executemany(
                "INSERT INTO evidence (source_id, kind, ref, title, section, position, body, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                batch,
            )
    db.execute("INSERT INTO evidence_fts (evidence_fts) VALUES ('optimize')")
    db.execute("INSERT INTO evidence_stem_fts (evidence_stem_fts) VALUES ('optimize')")
    db.conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--db", type=Path, help="database to build or reuse (default: a temporary one)")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory() if args.db is None else None
    db_path = args.db or Path(tmp.name) / "bench.db"  # type: ignore[union-attr]
    db = connect(db_path)
    have = db.execute("SELECT count(*) FROM evidence WHERE kind = 'passage'").fetchone()[0]
    db.conn.close()
    if have != args.passages:
        if have:
            sys.exit(f"{db_path}: holds {have} passages, not {args.passages}; give another --db")
        started = time.perf_counter()
        build(db_path, args.passages)
        print(f"built {args.passages} passages in {time.perf_counter() - started:.1f} s ({db_path})")
    db = connect(db_path)
    print(f"search latency, {args.passages} passages, --limit {args.limit}, {args.repeat} runs each")
    for label, query in QUERIES.items():
        search(db, query, limit=args.limit)  # warm the page cache
        timings: list[float] = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            hits = search(db, query, limit=args.limit)
            timings.append((time.perf_counter() - started) * 1000)
        exact = db.execute(
            "SELECT count(*) FROM evidence_fts WHERE evidence_fts MATCH ?", [fts_query(query)]
        ).fetchone()[0]
        forms = db.execute(
            "SELECT count(*) FROM evidence_stem_fts WHERE evidence_stem_fts MATCH ?", [stem_query(query)]
        ).fetchone()[0]
        stems = sum(h.match == "stem" for h in hits)
        print(
            f"  {label:16} {query!r:22} matches {exact:6} exact, {forms:6} any form  "
            f"hits {len(hits):3} ({stems:2} by form)  "
            f"p50 {statistics.median(timings):6.2f} ms  p95 {percentile(timings, 0.95):6.2f} ms"
        )
    size = sum(p.stat().st_size for p in db_path.parent.glob(db_path.name + "*"))
    print(f"  database {size / 1e6:.1f} MB (both full-text indexes)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
