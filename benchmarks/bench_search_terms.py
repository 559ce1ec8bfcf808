"""`kb search` time against the number of prefix terms (issue 29: it grew with their square).

    .venv/bin/python benchmarks/bench_search_terms.py [--passages 5000] [--terms 10,100,1000]

Builds bench_search's synthetic knowledge base, then times `kb.search.search()` for queries of N
prefix terms: the same prefix N times (`t* t* ...`: every passage matches each), N distinct
prefixes (`aab* abc* ...`: few passages match them all), and N prefixes joined by OR. Prints
milliseconds per query and the time per term; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import _vocabulary, build  # noqa: E402

from kb.db import connect  # noqa: E402
from kb.search import search  # noqa: E402


def queries(n: int) -> dict[str, str]:
    prefixes = sorted({w[:3] for w in _vocabulary(random.Random(7), 20_000)})
    distinct = [prefixes[i % len(prefixes)] + "*" for i in range(n)]
    return {
        "same prefix": " ".join(["t*"] * n),
        "distinct prefixes": " ".join(distinct),
        "prefixes OR-ed": " OR ".join(distinct),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=5000)
    parser.add_argument("--terms", default="10,100,1000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bench.db"
        build(db_path, args.passages)
        db = connect(db_path)
        search(db, "the")  # warm the page cache
        print(f"kb search, {args.passages} passages, --limit 20: milliseconds per query (per term)")
        for n in [int(x) for x in args.terms.split(",")]:
            for label, query in queries(n).items():
                started = time.perf_counter()
                hits = search(db, query)
                took = (time.perf_counter() - started) * 1000
                print(
                    f"  {n:5} terms  {label:18} {took:10.1f} ms ({took / n:7.2f} ms/term)  hits {len(hits)}"
                )


if __name__ == "__main__":
    main()
