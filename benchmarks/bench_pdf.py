"""What reading a PDF costs: the child process's start (Python and pdfminer.six imported once per
PDF), pdfminer's layout analysis per page, and the whole of kb.papers.pdf.extract_pdf, on PDFs the
tests write (tests/kb/pdf_support.py: two columns, a table, a sentence broken by a page).

- child start: extract_pdf on the two-page paper minus pdfminer's own time on it in this process;
- per page: extract_pdf on an N-page paper (the two pages repeated), divided by N.

    .venv/bin/python benchmarks/bench_pdf.py [--pages 60] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.papers.pdf import extract_pdf  # noqa: E402
from tests.kb.pdf_support import (  # noqa: E402
    LEFT_1,
    LEFT_2,
    LEFT_X,
    LINE,
    RIGHT_1,
    RIGHT_X,
    Page,
    build_pdf,
    two_column_paper,  # noqa: E402
)


def long_paper(pages: int) -> bytes:
    streams = []
    for number in range(pages):
        page = Page()
        lines = (LEFT_1 + LEFT_2) * 3
        for i, line in enumerate(lines[:50]):
            if line:
                page.text(LEFT_X, 740 - i * LINE, f"{line} ({number})", size=9)
                page.text(RIGHT_X, 740 - i * LINE, f"{RIGHT_1[i % len(RIGHT_1)]} [{number}]", size=9)
        streams.append(page.stream())
    return build_pdf(streams, title="A long paper about fused kernels, repeated")


def timed(fn: Any, repeat: int) -> float:
    found = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        found.append(time.perf_counter() - started)
    return statistics.median(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LAParams

    small = two_column_paper()
    big = long_paper(args.pages)

    def extract(data: bytes) -> None:
        extract_pdf(data, "bench.pdf", passage_chars=1200, seconds=600, memory_mb=2048)

    in_process = timed(lambda: list(extract_pages(io.BytesIO(small), laparams=LAParams())), args.repeat)
    whole_small = timed(lambda: extract(small), args.repeat)
    whole_big = timed(lambda: extract(big), args.repeat)
    result = {
        "two_page_paper_s": round(whole_small, 3),
        "pdfminer_in_process_two_pages_s": round(in_process, 3),
        "child_start_s": round(whole_small - in_process, 3),
        "pages": args.pages,
        "long_paper_s": round(whole_big, 3),
        "per_page_s": round(whole_big / args.pages, 4),
        "bytes": {"two_page": len(small), "long": len(big)},
    }
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:34} {value}")


if __name__ == "__main__":
    main()
