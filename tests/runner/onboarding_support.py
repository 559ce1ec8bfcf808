"""A small C library-like target with no autoresearch scripts of its own, for onboarding tests.

`bench/run_bench N` (the harness) calls the library (`src/hash.c`), which hashes N steps `passes()`
times; the harness times it and prints

    result 123456
    block 14 of 64: 812.34 MB/s, ratio 2.500

so a loose regex (`(\\d+(?:\\.\\d+)?)`) takes 14, the wrong number (the published 14-vs-52 case),
while `([\\d.]+) MB/s` takes the throughput. `SPEEDUP` halves the passes (a real 2x gain with the
same result) in the library.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from tests.conftest import git

STEPS = int(os.environ.get("AUTORESEARCH_TEST_ONBOARD_STEPS", "20000000"))

HASH_C = """\
/* tinyhash: the library under test. */
#include "hash.h"

static volatile unsigned long sink;

static unsigned long work(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 0; i < n; i++) s = s * 31u + (i ^ (s >> 7));
    sink = s;
    return s;
}

static unsigned long passes(void) {
    return 2;
}

unsigned long tinyhash(unsigned long n) {
    unsigned long r = 0;
    for (unsigned long p = 0; p < passes(); p++) r = work(n);
    return r;
}
"""

HASH_H = "unsigned long tinyhash(unsigned long n);\n"

BENCH_C = """\
/* Benchmark harness of tinyhash: hashes n steps and times itself. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../src/hash.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000UL;
    double t0 = seconds();
    unsigned long r = tinyhash(n);
    double dt = seconds() - t0;
    printf("result %lu\\n", r % 1000003UL);
    printf("block 14 of 64: %.2f MB/s, ratio %.3f\\n", (double)n * 8.0 / 1e6 / dt, 2.5);
    return 0;
}
"""

MAKEFILE = """\
bench/run_bench: bench/run_bench.c src/hash.c src/hash.h
\tcc -O1 -o bench/run_bench bench/run_bench.c src/hash.c
"""

SPEEDUP = ("src/hash.c", "    return 2;\n", "    return 1;\n")
GOOD_REGEX = r"([\d.]+) MB/s"
NAMED_REGEX = r"(?P<mbs>[\d.]+) MB/s, ratio (?P<ratio>[\d.]+)"
LOOSE_REGEX = r"(\d+(?:\.\d+)?)"
BUILD_CMD = "make -s"


def make_target(path: Path) -> Path:
    """The target as a real git repository: the library, its harness, a Makefile, a README; no scripts."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "bench").mkdir(exist_ok=True)
    (path / "src").mkdir(exist_ok=True)
    (path / "src" / "hash.c").write_text(HASH_C)
    (path / "src" / "hash.h").write_text(HASH_H)
    (path / "bench" / "run_bench.c").write_text(BENCH_C)
    (path / "Makefile").write_text(MAKEFILE)
    (path / "README.md").write_text("# tinyhash\n\nBuild with `make`; `bench/run_bench N` benchmarks.\n")
    (path / ".gitignore").write_text("bench/run_bench\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "baseline")
    return path


def expected_result(steps: int = 1000) -> str:
    """What `bench/run_bench STEPS` prints as its result, with the real compiler."""
    with tempfile.TemporaryDirectory() as tmp:
        make_target(Path(tmp) / "t")
        subprocess.run(["make", "-s"], cwd=Path(tmp) / "t", check=True)
        binary = Path(tmp) / "t" / "bench" / "run_bench"
        out = subprocess.run([str(binary), str(steps)], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()[0]


def check_cmd() -> str:
    return f"test \"$(./bench/run_bench 1000 | head -n 1)\" = '{expected_result()}'"


def bench_cmd(steps: int = STEPS) -> str:
    return f"./bench/run_bench {steps}"


def make_diff(target: Path, edit: tuple[str, str, str]) -> str:
    file, old, new = edit
    path = target / file
    original = path.read_text()
    assert original.count(old) == 1
    path.write_text(original.replace(old, new))
    try:
        return git(target, "diff") + "\n"
    finally:
        path.write_text(original)


def cli(*args: str, input_text: str | None = None) -> Result:
    """The command line in this process (click's runner), stderr apart."""
    from tui.cli import main

    return CliRunner(mix_stderr=False).invoke(main, list(args), input=input_text, catch_exceptions=False)


def init(ws: Path, target: Path, *extra: str) -> Result:
    return cli("init", str(ws), "--target", str(target), "--build-cmd", BUILD_CMD, *extra)


def set_config(ws: Path, section: str, **values: Any) -> None:
    """Change keys of one section of the workspace's config (rewritten by the config writer)."""
    from kb.config import dump_settings, load_settings

    settings = load_settings(ws / "autoresearch.toml")
    data = settings.model_dump()
    node = data
    for part in section.split("."):
        node = node[part]
    node.update(values)
    (ws / "autoresearch.toml").write_text(dump_settings(type(settings).model_validate(data)))
