"""Paper ingestion throughput: 500 generated pages, from a folder and over HTTP on 127.0.0.1.

    .venv/bin/python benchmarks/bench_ingest.py [--pages 500]

Each page is a blog-style article (navigation, cookie banner, sidebar, footer around 4-8 sections
of prose, a code block with identifiers) of about 8-20 kB. Ingestion is the real path: fetch or
read, decode, trafilatura extraction, passage splitting, dedupe checks and the SQLite/FTS5 writes.
Goal (issue 3): >= 20 pages/s. Prints figures; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import html
import random
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb.config import KBSettings  # noqa: E402
from kb.db import connect  # noqa: E402
from kb.papers import add_papers  # noqa: E402

WORDS = [
    "kernel",
    "cache",
    "memory",
    "bandwidth",
    "latency",
    "vector",
    "register",
    "tensor",
    "graph",
    "fusion",
    "quantization",
    "block",
    "thread",
    "scheduler",
    "throughput",
    "matrix",
    "multiply",
    "activation",
    "layer",
    "prefetch",
    "loop",
    "unroll",
    "branch",
    "pipeline",
    "compute",
    "bound",
    "token",
    "generation",
    "prompt",
    "processing",
    "batch",
    "attention",
    "softmax",
    "norm",
]
IDENTIFIERS = ["ggml_can_fuse", "Q4_0_8x8", "_mm256_fmadd_ps", "ggml_vec_dot_q4_0", "GGML_OP_RMS_NORM"]


def _sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(8, 20))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(IDENTIFIERS))
    return " ".join(words).capitalize() + "."


def page(index: int, rng: random.Random) -> str:
    sections = []
    for s in range(rng.randint(4, 8)):
        paragraphs = "".join(
            f"<p>{html.escape(' '.join(_sentence(rng) for _ in range(rng.randint(3, 7))))}</p>"
            for _ in range(rng.randint(2, 4))
        )
        sections.append(f"<h2>Section {s} of article {index}</h2>{paragraphs}")
    code = html.escape(f"if (ggml_can_fuse(cgraph, {index}, {{ GGML_OP_RMS_NORM, GGML_OP_MUL }})) {{ }}")
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Article {index} on kernels | Bench Blog</title><meta name="author" content="Author {index % 17}">
<meta property="article:published_time" content="2025-{index % 12 + 1:02d}-01"></head><body>
<nav><a href="/">Home</a> <a href="/archive">Archive</a></nav>
<div class="cookie-banner">We use cookies. <button>Accept all cookies</button></div>
<aside class="sidebar"><h3>Related posts</h3><ul><li>Post A</li><li>Post B</li></ul></aside>
<main><article><h1>Article {index} on kernels</h1>{sections[0]}<pre><code>{code}</code></pre>
{"".join(sections[1:])}</article></main>
<footer>Copyright 2025 Bench Blog. All rights reserved.</footer></body></html>"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def run(label: str, inputs: list[str], db_path: Path) -> None:
    db = connect(db_path)
    settings = KBSettings()
    started = time.perf_counter()
    results = add_papers(db, inputs, settings)
    elapsed = time.perf_counter() - started
    added = sum(r.status == "added" for r in results)
    failed = [r.message for r in results if r.status == "error"]
    passages = db.execute("SELECT count(*) FROM evidence WHERE kind = 'passage'").fetchone()[0]
    print(
        f"  {label:8} {len(inputs)} pages in {elapsed:6.2f} s = {len(inputs) / elapsed:6.1f} pages/s "
        f"({added} added, {len(failed)} failed, {passages} passages)"
    )
    for message in failed[:3]:
        print(f"    failed: {message}")
    db.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "pages"
        folder.mkdir()
        sizes = []
        for index in range(args.pages):
            text = page(index, rng)
            sizes.append(len(text))
            (folder / f"page{index:04d}.html").write_text(text, encoding="utf-8")
        print(f"paper ingestion, {args.pages} pages of {min(sizes) // 1000}-{max(sizes) // 1000} kB")
        import trafilatura  # noqa: F401  (imported once up front, as a long CLI run would)

        files = sorted(str(p) for p in folder.glob("*.html"))
        run("folder", files, Path(tmp) / "files.db")
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(folder)))
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        port = server.server_address[1]
        urls = [f"http://127.0.0.1:{port}/{Path(f).name}" for f in files]
        try:
            run("http", urls, Path(tmp) / "http.db")
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()
