"""What a fork commit claims and touches: sentences, before/after rates and benchmark tables in the
styles ik_llama.cpp writes them, each with the metric it names; areas and backends by path."""

from __future__ import annotations

from kb.commit_facts import area_of, commit_facts, parse_claims
from kb.config import InventorySettings
from kb.inventory.layout import BackendMap


def _claims(message: str) -> list[tuple[float, str | None, str]]:
    return [(c.effect, c.metric, c.how) for c in parse_claims(message)]


def test_sentences_name_their_metric() -> None:
    message = "Faster Q4_0\n\nThis gives a 30% faster PP on AVX2 and 1.5x speedup for TG. Also +3% tg."
    assert _claims(message) == [(0.3, "pp", "text"), (0.03, "tg", "text"), (0.5, "tg", "text")]
    assert _claims("Here we get 3.65X (!) for PP-512 (53 t/s).") == [(2.65, "pp", "text")]
    assert _claims("A 12% improvement overall") == [(0.12, None, "text")]


def test_before_and_after_rates() -> None:
    assert _claims("PP-512 becomes 168 t/s up from 137 t/s.") == [(0.2263, "pp", "rates")]
    assert _claims("iq1_bn(Metal): 60 -> 64 t/s for TG") == [(0.0667, "tg", "rates")]
    assert _claims("PP is 9400 t/s, down from 9600 t/s") == []  # a loss is not a claim
    # No metric in the sentence: the one the subject line names.
    assert _claims("iqk_mul_mat: faster q3_K TG\n\nWe get 31 t/s up from 26 t/s.") == [
        (0.1923, "tg", "rates")
    ]


def test_benchmark_tables() -> None:
    message = """Repacked kernels

| model | test | t/s (main) | t/s (PR) | Speedup |
|---|---|---:|---:|---:|
| llama 8B Q4_0 | pp512 | 100.00 ± 1.0 | 130.00 ± 2.0 | 1.300 |
| llama 8B Q4_0 | tg128 | 10.00 ± 0.1 | 11.00 ± 0.1 | 1.100 |

| model | size | threads | test | t/s |
| --- | ---: | ---: | ---: | ---: |
| llama 8B | 4.3 GiB | 16 | pp512 | 150.1 ± 0.5 |
"""
    # The second table has one t/s column: it compares nothing, so it claims nothing.
    assert _claims(message) == [(0.3, "pp", "table"), (0.1, "tg", "table")]
    two_rates = "| model | test | t/s (before) | t/s (after) |\n|-|-|-|-|\n| m | tg128 | 20.0 | 25.0 |"
    assert _claims(two_rates) == [(0.25, "tg", "table")]


def test_look_alikes_are_not_claims() -> None:
    assert _claims("Use 2x6 tiles instead of 3x4; q4_0 has 4x8 blocks.") == []
    assert _claims("Reduces memory by 30%") == []
    assert _claims("We get 1000x faster on a toy case") == []  # beyond any credible factor


def test_areas_and_backends_follow_the_inventory_rules() -> None:
    ik = [
        "ggml/src/ggml.c",
        "ggml/src/iqk/iqk_mul_mat.cpp",
        "ggml/src/ggml-cuda/fa.cu",
        "ggml/src/ggml-metal.m",
    ]
    rules = BackendMap.for_paths(ik + ["ggml/src/ggml-cuda.cu", "src/llama.cpp"], InventorySettings())
    facts = commit_facts(ik + ["docs/build.md", "examples/server/public/index.html.gz"], "", rules)
    assert facts.backends == ["cpu", "cuda", "metal"]
    assert facts.areas == ["backend", "web", "docs"]
    assert [
        area_of(p, None) for p in ("CMakeLists.txt", ".github/workflows/build.yml", "tests/test-x.cpp")
    ] == [
        "build",
        "ci",
        "tests",
    ]
    assert [area_of(p, None) for p in ("src/llama.cpp", "ggml/src/ggml-alloc.c", "gguf-py/x.py")] == [
        "model",
        "core",
        "python",
    ]


def test_commits_from_an_older_layout_are_classified_too() -> None:
    """ik_llama.cpp kept its CPU kernels at the top of the tree before ggml/src/: a commit of that time
    touches `iqk_mul_mat.cpp`, `ggml.c`, `ggml-cuda/convert.cu`, `ggml-metal.metal`."""
    from kb.inventory.layout import HistoryBackends

    head = ["ggml/src/ggml.c", "ggml/src/iqk/iqk_mul_mat.cpp", "ggml/src/ggml-cuda/fa.cu", "src/llama.cpp"]
    rules = HistoryBackends.for_paths(head, InventorySettings())
    old = [
        "iqk_mul_mat.cpp",
        "iqk-quantize.cpp",
        "ggml.c",
        "ggml-cuda/convert.cu",
        "ggml-metal.metal",
        "llama.cpp",
    ]
    assert [rules.backend_of(p) for p in old] == ["cpu", "cpu", "cpu", "cuda", "metal", None]
    assert [rules.backend_of(p) for p in head] == ["cpu", "cpu", "cuda", None]
