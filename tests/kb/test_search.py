"""Full-text search: safe query handling, ranking, kinds, snippets, evidence detail and stats."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlite_utils

from kb import search as search_module
from kb.db import connect, insert, transaction
from kb.errors import UserError
from kb.search import fts_query, get_evidence, search, stats


@pytest.fixture
def db(tmp_path: Path) -> sqlite_utils.Database:
    """A small knowledge base with every kind of evidence."""
    db = connect(tmp_path / "kb.db")
    with transaction(db):
        paper = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "title": "Fusion on CPUs",
                "url": "https://e.org/p",
                "canonical_url": "https://e.org/p",
                "created_at": 1.0,
                "updated_at": 1.0,
            },
        )
        ru = insert(
            db,
            "sources",
            {"kind": "paper", "title": "Слияние операций", "created_at": 1.0, "updated_at": 1.0},
        )
        fork = insert(
            db,
            "sources",
            {"kind": "fork", "name": "ik", "title": "fork ik (main)", "created_at": 1.0, "updated_at": 1.0},
        )
        inventory = insert(
            db, "sources", {"kind": "inventory", "name": "scan", "created_at": 1.0, "updated_at": 1.0}
        )
        items = [
            (
                paper,
                "passage",
                "1",
                "Fusion on CPUs",
                "Background",
                "The scheduler calls ggml_can_fuse before merging nodes. Memory bandwidth bounds generation.",
            ),
            (
                paper,
                "passage",
                "2",
                "Fusion on CPUs",
                "Results",
                "Q4_0_8x8 repacking lets _mm256_fmadd_ps work on eight lanes. The gain was three percent.",
            ),
            (
                paper,
                "passage",
                "3",
                "Fusion on CPUs",
                "Memory bandwidth",
                "A section whose heading names the topic; the body talks about other things entirely.",
            ),
            (
                ru,
                "passage",
                "1",
                "Слияние операций",
                "Введение",
                "Оптимизация упирается в пропускную способность памяти. Ёмкая идея: объединить ядра.",
            ),
            (
                fork,
                "commit",
                "a" * 40,
                "ggml-cpu: fuse RMS_NORM and MUL",
                "ik",
                "ggml-cpu: fuse RMS_NORM and MUL\n\nFiles:\nggml/src/ggml-cpu/ops.c\n\n"
                "+ if (ggml_can_fuse(cg, i))",
            ),
            (
                inventory,
                "fusion",
                "cuda:RMS_NORM+MUL",
                "RMS_NORM+MUL",
                "cuda",
                "RMS_NORM+MUL fused in cuda at ggml/src/ggml-cuda/ggml-cuda.cu:3000 via ggml_can_fuse",
            ),
            (
                inventory,
                "gap",
                "gap:RMS_NORM+MUL",
                "RMS_NORM+MUL missing in cpu",
                None,
                "RMS_NORM+MUL is fused in cuda, metal but not in cpu",
            ),
            (inventory, "single_op", "cpu:SOFT_MAX", "SOFT_MAX", "cpu", "SOFT_MAX with scale and mask"),
            (inventory, "note", "n1", "Note about commit messages", None, "the word commit and passage here"),
        ]
        for source_id, kind, ref, title, section, body in items:
            insert(
                db,
                "evidence",
                {
                    "source_id": source_id,
                    "kind": kind,
                    "ref": ref,
                    "title": title,
                    "section": section,
                    "body": body,
                    "created_at": 1.0,
                    "position": int(ref) if ref.isdigit() else None,
                },
            )
        insert(
            db,
            "commits",
            {
                "evidence_id": 5,
                "sha": "a" * 40,
                "subject": "ggml-cpu: fuse RMS_NORM and MUL",
                "files": ["ggml/src/ggml-cpu/ops.c"],
                "upstreamed": 0,
                "diff": "diff --git ...",
            },
        )
        insert(db, "commit_files", {"evidence_id": 5, "path": "ggml/src/ggml-cpu/ops.c"})
        insert(
            db,
            "fusions",
            {
                "evidence_id": 6,
                "backend": "cuda",
                "ops": "RMS_NORM+MUL",
                "kind": "graph",
                "file": "ggml/src/ggml-cuda/ggml-cuda.cu",
                "line": 3000,
            },
        )
    return db


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ggml_can_fuse", '{title section body} : ("ggml_can_fuse")'),
        ("memory bandwidth", '{title section body} : ("memory" AND "bandwidth")'),
        ('"memory bandwidth"', '{title section body} : ("memory bandwidth")'),
        ("fus*", '{title section body} : ("fus" *)'),
        ("cuda OR metal", '{title section body} : (("cuda" OR "metal"))'),
        ('say "hi', '{title section body} : ("say" AND "hi")'),
        ('NOT AND NEAR( a"b', '{title section body} : ("NOT" AND "AND" AND "NEAR(" AND "a""b")'),
        ("OR x", '{title section body} : ("x")'),
    ],
)
def test_queries_are_quoted(query: str, expected: str) -> None:
    assert fts_query(query) == expected


def test_nothing_to_search_for() -> None:
    for query in ("", "   ", '""', "+ - ( )", "OR"):
        with pytest.raises(UserError, match="nothing to search for"):
            fts_query(query)


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "(",
        "a AND",
        "NEAR(x y",
        "col:value",
        "^start",
        "x' OR 1=1 --",
        "ggml_can_fuse(cgraph,",
        "RMS_NORM+MUL",
        "{title}: x",
        "*",
        "-x",
    ],
)
def test_hostile_queries_never_crash(db: sqlite_utils.Database, query: str) -> None:
    try:
        search(db, query)
    except UserError as exc:
        assert "nothing to search for" in str(exc)


def test_identifiers_phrases_and_punctuation(db: sqlite_utils.Database) -> None:
    hits = search(db, "ggml_can_fuse")
    assert {h.kind for h in hits} == {"paper", "commit", "fusion"}
    assert [h.ref for h in search(db, "Q4_0_8x8")] == ["2"]
    assert [h.ref for h in search(db, "_mm256_fmadd_ps")] == ["2"]
    assert [h.id for h in search(db, "ggml_can_fuse(cg,")] == [5]  # punctuation splits like the index
    # `+` splits tokens like the index does, and the two must be adjacent: "RMS_NORM and MUL" is not.
    assert {h.evidence_kind for h in search(db, "RMS_NORM+MUL")} == {"fusion", "gap"}
    # An identifier's parts find it too, after every exact hit (here there is none).
    parts = search(db, "ggml_can")
    assert {h.id for h in parts} == {h.id for h in hits} and {h.match for h in parts} == {"stem"}
    assert {h.id for h in search(db, "ggml_can*")} == {h.id for h in hits}
    assert [h.ref for h in search(db, '"three percent"')] == ["2"]
    assert search(db, '"percent three"') == []


def test_title_and_heading_hits_rank_first(db: sqlite_utils.Database) -> None:
    hits = search(db, '"memory bandwidth"')
    assert [h.ref for h in hits] == ["3", "1"]
    assert hits[0].score > hits[1].score > 0


def test_kinds(db: sqlite_utils.Database) -> None:
    assert [h.kind for h in search(db, "ggml_can_fuse", kind="commit")] == ["commit"]
    assert [h.kind for h in search(db, "ggml_can_fuse", kind="paper")] == ["paper"]
    assert sorted(h.evidence_kind for h in search(db, "RMS_NORM", kind="fusion")) == ["fusion", "gap"]
    assert [h.evidence_kind for h in search(db, "SOFT_MAX", kind="fusion")] == ["single_op"]
    # Words that name a kind are matched in the text, never against the kind column.
    assert [h.kind for h in search(db, "commit")] == ["note"]
    assert [h.kind for h in search(db, "passage")] == ["note"]
    with pytest.raises(UserError, match="bogus: unknown kind"):
        search(db, "x", kind="bogus")


def test_hit_fields_and_snippets(db: sqlite_utils.Database) -> None:
    (hit,) = search(db, "Q4_0_8x8")
    assert hit.to_json() == {
        "id": 2,
        "kind": "paper",
        "evidence_kind": "passage",
        "title": "Fusion on CPUs",
        "section": "Results",
        "snippet": hit.snippet,
        "score": hit.score,
        "source_id": 1,
        "source": "Fusion on CPUs",
        "ref": "2",
        "position": 2,
        "match": "exact",
    }
    assert "**Q4_0_8x8**" in hit.snippet
    (hit,) = search(db, "Q4_0_8x8", marks=("<b>", "</b>"))
    assert "<b>Q4_0_8x8</b>" in hit.snippet


def test_russian_case_and_yo(db: sqlite_utils.Database) -> None:
    for query in (
        "пропускную",
        "ПРОПУСКНУЮ СПОСОБНОСТЬ",
        '"пропускную способность"',
        "Ёмкая",
        "емкая",
        "оптимизац*",
        "введение",
    ):
        assert [h.ref for h in search(db, query)] == ["1"], query
        assert search(db, query)[0].source == "Слияние операций"


def test_limit(db: sqlite_utils.Database) -> None:
    assert len(search(db, "the", limit=1)) == 1
    with pytest.raises(UserError, match="--limit 0: must be between 1 and 1000"):
        search(db, "the", limit=0)


def test_common_words_rank_the_newest_window(
    db: sqlite_utils.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = {h.id for h in search(db, "the", limit=50)}
    assert len(everything) >= 4
    monkeypatch.setattr(search_module, "RANK_WINDOW", 2)
    windowed = search(db, "the", limit=50)
    assert {h.id for h in windowed} == set(sorted(everything)[-2:])


def test_get_evidence(db: sqlite_utils.Database) -> None:
    commit = get_evidence(db, 5)
    assert commit.kind == "commit" and commit.commit is not None
    assert commit.commit["files"] == ["ggml/src/ggml-cpu/ops.c"] and commit.commit["upstreamed"] is False
    assert commit.files == ["ggml/src/ggml-cpu/ops.c"] and commit.source["name"] == "ik"
    fusion = get_evidence(db, 6)
    assert fusion.kind == "fusion" and fusion.fusion is not None and fusion.fusion["line"] == 3000
    passage = get_evidence(db, 1)
    assert (passage.section, passage.position, passage.source["canonical_url"]) == (
        "Background",
        1,
        "https://e.org/p",
    )
    with pytest.raises(UserError, match="evidence 999: no such evidence id"):
        get_evidence(db, 999)


def test_stats(db: sqlite_utils.Database) -> None:
    result = stats(db)
    assert result.evidence == {"commit": 1, "fusion": 1, "gap": 1, "note": 1, "passage": 4, "single_op": 1}
    assert result.sources == {"fork": 1, "inventory": 1, "paper": 2}
    assert result.db_bytes > 0 and result.db_path.endswith("kb.db")


def test_search_follows_updates_and_deletes(db: sqlite_utils.Database) -> None:
    with transaction(db):
        db.execute("UPDATE evidence SET body = 'now about prefetching' WHERE id = 2")
    assert search(db, "Q4_0_8x8") == []
    assert [h.id for h in search(db, "prefetching")] == [2]
    with transaction(db):
        db.execute("DELETE FROM evidence WHERE id = 2")
    assert search(db, "prefetching") == []
