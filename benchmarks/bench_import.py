"""Import speed: a pi-autoresearch log of N run lines (with hook lines) into a fresh database.

Run: .venv/bin/python benchmarks/bench_import.py [--lines N]
Prints the wall time of `runner.record.importer.import_log` and lines per second.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from kb.db import connect
from runner.record.importer import import_log


def write_log(path: Path, lines: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    config = {"type": "config", "name": "bench", "metricName": "total_ms", "bestDirection": "lower"}
    with path.open("w") as f:
        f.write(json.dumps(config) + "\n")
        for i in range(1, lines + 1):
            if i % 10 == 0:
                f.write(json.dumps({"type": "hook", "stage": "before", "exit_code": 0}) + "\n")
            line = {
                "run": i,
                "commit": f"{i:07x}",
                "metric": round(100 * rnd.uniform(0.9, 1.1), 3),
                "metrics": {"compile_ms": round(rnd.uniform(1, 2), 3)},
                "status": rnd.choice(["keep", "discard", "discard", "crash"]),
                "description": f"idea {i}",
                "timestamp": 1_770_000_000_000 + i * 1000,
                "segment": 0,
                "confidence": None,
                "asi": {"hypothesis": f"hypothesis {i}"},
            }
            f.write(json.dumps(line) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "autoresearch.jsonl"
        write_log(log, args.lines)
        db = connect(Path(tmp) / "autoresearch.db")
        start = time.perf_counter()
        result = import_log(db, log)
        seconds = time.perf_counter() - start
    print(
        f"{args.lines} run lines ({result.ignored.get('hook', 0)} hook lines): {seconds:.2f} s, "
        f"{args.lines / seconds:,.0f} lines/s, {result.imported_lines} experiments"
    )


if __name__ == "__main__":
    main()
