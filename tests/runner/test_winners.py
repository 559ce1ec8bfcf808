"""Winners on real git: commits with trailers on the run branch, exported patches, provenance."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from kb.db import insert, one, rows, transaction, update
from kb.errors import UserError
from runner.record.winners import commit_winner, experiment_for_commit, led_to, provenance
from tests.runner.fixtures import (
    BLOG_URL,
    FORK_SHA,
    PAPER_URL,
    HistoryFixture,
    build_history,
    finished_history,
)

__all__ = ["finished_history"]  # a pytest fixture, imported to be used here


def git(*args: str, cwd: Path | None = None, input_text: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, input=input_text
    ).stdout


def mirror(h: HistoryFixture, *args: str, input_text: str | None = None) -> str:
    return git("--git-dir", str(h.ws.mirror_path), *args, input_text=input_text)


def branch_log(h: HistoryFixture) -> list[str]:
    return mirror(h, "rev-list", f"autoresearch/{h.run_name}").split()


def test_winners_are_commits_on_the_run_branch_with_trailers(finished_history: HistoryFixture) -> None:
    h = finished_history
    fuse, quant = h.winners["fuse"], h.winners["quant"]
    # baseline <- fuse <- quant, in the bare mirror, on autoresearch/r1.
    assert branch_log(h) == [quant.commit_sha, fuse.commit_sha, h.baseline]
    assert fuse.parent_sha == h.baseline and quant.parent_sha == fuse.commit_sha
    assert (fuse.position, quant.position) == (1, 2)
    # The patch really is in the committed tree.
    assert "rms_norm_mul" in mirror(h, "show", f"{fuse.commit_sha}:src/norm.c")
    assert "#pragma GCC unroll 8" in mirror(h, "show", "autoresearch/r1:src/quant.c")
    assert "rms_norm_mul" in mirror(h, "show", "autoresearch/r1:src/norm.c")

    # git itself parses the trailers.
    message = mirror(h, "log", "-1", "--format=%B", fuse.commit_sha)
    parsed = git("interpret-trailers", "--parse", input_text=message).splitlines()
    pairs = [line.split(": ", 1) for line in parsed]
    assert ["Autoresearch-Run", "r1"] in pairs
    assert ["Autoresearch-Experiment", str(h.exp["fuse"])] in pairs
    assert ["Autoresearch-Hypothesis", str(h.hyp["fuse"])] in pairs
    sources = [v for k, v in pairs if k == "Autoresearch-Source"]
    assert sources == [PAPER_URL, f"passage:{h.evidence['passage']}", f"gap:{h.evidence['gap']}"]
    result = json.loads(dict(pairs)["Result"])

    db = h.db()
    decision = one(db, "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [h.exp["fuse"]])
    assert decision is not None and decision["verdict"] == "keep"
    assert result["effect"] == pytest.approx(decision["effect"])
    assert result["ci"] == pytest.approx([decision["ci_low"], decision["ci_high"]])
    assert result["pairs"] == decision["pairs"] == 16
    assert result["metric"] == "tg" and result["direction"] == "higher"
    assert set(result["metrics"]) == {"pp"}
    assert result == fuse.result

    # The fork winner cites the fork commit.
    quant_msg = mirror(h, "log", "-1", "--format=%B", quant.commit_sha)
    assert f"Autoresearch-Source: fork:ik_llama.cpp@{FORK_SHA}" in quant_msg
    # The database points at the same commits.
    run = one(db, "SELECT * FROM runs WHERE id = ?", [h.run_id])
    assert run is not None and run["head_commit"] == quant.commit_sha
    found = rows(db, "SELECT experiment_id, commit_sha, position FROM winners ORDER BY position")
    assert found == [
        {"experiment_id": h.exp["fuse"], "commit_sha": fuse.commit_sha, "position": 1},
        {"experiment_id": h.exp["quant"], "commit_sha": quant.commit_sha, "position": 2},
    ]


def test_exported_patch_has_the_provenance_header_and_applies(
    finished_history: HistoryFixture, tmp_path: Path
) -> None:
    h = finished_history
    fuse, quant = h.winners["fuse"], h.winners["quant"]
    assert fuse.patch_file == h.ws.patches_dir / "0001-fuse-rms-norm-and-mul-on-the-cpu.patch"
    assert quant.patch_file.name == "0002-unroll-the-q4-quantize-loop-ik-llama-cpp.patch"
    text = fuse.patch_file.read_text()
    header = text.split("\ndiff --git", 1)[0]
    assert "Subject: [PATCH] Fuse RMS_NORM and MUL on the CPU" in header  # title
    assert f"Hypothesis {h.hyp['fuse']}: Fuse RMS_NORM and MUL on the CPU" in header
    assert "Measured: tg +5.71% (CI +4.06% .. +8.06%), 16 pairs" in header  # effect with CI
    assert f"Baseline: {h.baseline}" in header
    assert "Date: Thu, 1 Jan 2026" in header
    assert f"gap:{h.evidence['gap']}  RMS_NORM+MUL - ggml/src/ggml-cuda/ggml-cuda.cu:2931" in header
    assert PAPER_URL in header

    # Both patches apply, in order, to a clone of the baseline, and give the branch's tree.
    clone = tmp_path / "clone"
    git("clone", "-q", str(h.target), str(clone))
    git("am", "-q", str(fuse.patch_file), str(quant.patch_file), cwd=clone)
    tree = git("rev-parse", "HEAD^{tree}", cwd=clone).strip()
    assert tree == mirror(h, "rev-parse", "autoresearch/r1^{tree}").strip()


def test_commit_winner_is_idempotent(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    before = (
        branch_log(h),
        sorted(os.listdir(h.ws.patches_dir)),
        db.execute("SELECT count(*) FROM events").fetchone(),
    )
    again = commit_winner(h.ws, db, h.exp["fuse"])
    assert again.created is False
    assert again.commit_sha == h.winners["fuse"].commit_sha
    assert again.patch_file == h.winners["fuse"].patch_file
    assert again.position == 1
    after = (
        branch_log(h),
        sorted(os.listdir(h.ws.patches_dir)),
        db.execute("SELECT count(*) FROM events").fetchone(),
    )
    assert after == before


def test_resume_after_a_crash_reuses_the_commit_and_the_patch_file(tmp_path: Path) -> None:
    h = build_history(tmp_path, commit_winners=False)
    db = h.db()
    first = commit_winner(h.ws, db, h.exp["fuse"])
    assert first.created and branch_log(h) == [first.commit_sha, h.baseline]

    # Killed after the commit and the export, before the row: the file and commit are found again.
    with transaction(db):
        db.execute("DELETE FROM winners")
    second = commit_winner(h.ws, db, h.exp["fuse"])
    assert second.created and second.commit_sha == first.commit_sha
    assert branch_log(h) == [first.commit_sha, h.baseline]
    assert sorted(os.listdir(h.ws.patches_dir)) == [first.patch_file.name]

    # Killed right after the commit (no file, no row): the commit is reused, the file written again.
    with transaction(db):
        db.execute("DELETE FROM winners")
    first.patch_file.unlink()
    third = commit_winner(h.ws, db, h.exp["fuse"])
    assert third.commit_sha == first.commit_sha and third.patch_file == first.patch_file
    assert third.patch_file.exists()
    assert db.execute("SELECT count(*) FROM winners").fetchone()[0] == 1

    # A patch file deleted later is exported again under its recorded name.
    first.patch_file.unlink()
    fourth = commit_winner(h.ws, db, h.exp["fuse"])
    assert fourth.created is False and fourth.patch_file.exists()


def test_only_kept_candidates_become_winners(tmp_path: Path) -> None:
    h = build_history(tmp_path, commit_winners=False)
    db = h.db()
    for label, reason in (
        ("prefetch", "status discarded without a keep decision"),
        ("wrong", "status checks_failed"),
        ("self_test", "a self_test experiment without a patch"),
    ):
        with pytest.raises(UserError, match=reason):
            commit_winner(h.ws, db, h.exp[label])
    with pytest.raises(UserError, match="experiment 999: no such experiment"):
        commit_winner(h.ws, db, 999)
    assert branch_log(h) == [h.baseline]
    assert db.execute("SELECT count(*) FROM winners").fetchone()[0] == 0
    assert list(h.ws.patches_dir.iterdir()) == []


def test_a_patch_that_no_longer_applies_is_refused_without_side_effects(tmp_path: Path) -> None:
    h = build_history(tmp_path)  # fuse and quant are on the branch
    db = h.db()
    # `stale` edits the same lines of norm.c as the fuse winner; pretend it was kept in the same wave.
    with transaction(db):
        update(db, "experiments", h.exp["stale"], {"status": "kept", "reason": None})
        insert(
            db,
            "decisions",
            {
                "experiment_id": h.exp["stale"],
                "verdict": "keep",
                "metric": "tg",
                "effect": 0.02,
                "ci_low": 0.01,
                "ci_high": 0.03,
                "pairs": 24,
                "is_final": 1,
                "created_at": 1.0,
            },
        )
    head = branch_log(h)
    files = sorted(os.listdir(h.ws.patches_dir))
    with pytest.raises(UserError, match="patch does not apply onto"):
        commit_winner(h.ws, db, h.exp["stale"])
    assert branch_log(h) == head
    assert sorted(os.listdir(h.ws.patches_dir)) == files
    assert one(db, "SELECT id FROM winners WHERE experiment_id = ?", [h.exp["stale"]]) is None


def test_concurrent_winners_both_land_on_the_branch(tmp_path: Path) -> None:
    h = build_history(tmp_path, commit_winners=False)
    errors: list[BaseException] = []

    def commit(label: str) -> None:
        try:
            commit_winner(h.ws, h.ws.db(), h.exp[label])  # one connection per thread
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(label,)) for label in ("fuse", "quant")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = h.db()
    found = rows(db, "SELECT experiment_id, commit_sha, position, patch_file FROM winners ORDER BY position")
    assert [r["position"] for r in found] == [1, 2]
    assert len({r["patch_file"] for r in found}) == 2
    log = branch_log(h)
    assert len(log) == 3 and log[-1] == h.baseline
    assert {r["commit_sha"] for r in found} == set(log[:2])
    run = one(db, "SELECT head_commit FROM runs WHERE id = ?", [h.run_id])
    assert run is not None and run["head_commit"] == log[0]


def test_winner_commits_are_reproducible(tmp_path: Path, finished_history: HistoryFixture) -> None:
    other = build_history(tmp_path)
    assert other.winners["fuse"].commit_sha == finished_history.winners["fuse"].commit_sha
    assert other.winners["quant"].commit_sha == finished_history.winners["quant"].commit_sha
    assert (
        other.winners["quant"].patch_file.read_bytes()
        == finished_history.winners["quant"].patch_file.read_bytes()
    )


def test_provenance_walks_from_commit_to_sources(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    sha = h.winners["fuse"].commit_sha
    assert experiment_for_commit(db, sha[:10]) == h.exp["fuse"]
    with pytest.raises(UserError, match="no winner commit"):
        experiment_for_commit(db, "deadbeef")
    with pytest.raises(UserError, match="not a commit sha"):
        experiment_for_commit(db, "HEAD")

    chain = provenance(db, h.exp["fuse"])
    assert chain["winner"]["commit"] == sha
    assert chain["winner"]["branch"] == "autoresearch/r1"
    assert chain["winner"]["patch_file"] == "patches/0001-fuse-rms-norm-and-mul-on-the-cpu.patch"
    assert chain["experiment"]["status"] == "kept" and chain["experiment"]["wave"] == 1
    assert chain["decision"]["verdict"] == "keep" and chain["decision"]["pairs"] == 16
    assert chain["patch"]["files"] == ["src/norm.c"]
    assert chain["hypothesis"]["id"] == h.hyp["fuse"] and chain["hypothesis"]["origin"] == "miner:gap"
    by_kind = {ev["kind"]: ev for ev in chain["evidence"]}
    assert by_kind["gap"]["location"] == "ggml/src/ggml-cuda/ggml-cuda.cu:2931"
    assert by_kind["gap"]["source"]["kind"] == "inventory"
    assert by_kind["passage"]["source"]["url"] == PAPER_URL
    assert "4.2 Fusing normalisation" in by_kind["passage"]["location"]

    fork = provenance(db, h.exp["quant"])
    (ev,) = fork["evidence"]
    assert ev["source"]["url"] == "https://github.com/ikawrakow/ik_llama.cpp"
    assert ev["location"].startswith(f"https://github.com/ikawrakow/ik_llama.cpp@{FORK_SHA}")
    assert fork["patch"]["author_kind"] == "fork_commit"

    # A discarded experiment with free-form refs: no winner, refs resolved where the KB knows them.
    manual = provenance(db, h.exp["prefetch"])
    assert manual["winner"] is None and manual["decision"]["verdict"] == "discard"
    assert [r["ref"] for r in manual["source_refs"]] == [BLOG_URL, "note:helped on one x86 box"]
    assert manual["source_refs"][0]["source_id"] is None  # a URL the KB has not ingested


def test_reverse_provenance_from_sources_and_evidence(finished_history: HistoryFixture) -> None:
    h = finished_history
    db = h.db()
    paper = led_to(db, source_id=h.sources["paper"])
    assert [e["id"] for e in paper["experiments"]] == [h.exp["fuse"]]
    assert paper["experiments"][0]["winner_commit"] == h.winners["fuse"].commit_sha
    fork = led_to(db, evidence_id=h.evidence["commit"])
    assert [e["id"] for e in fork["experiments"]] == [h.exp["quant"]]
    assert fork["experiments"][0]["effect"] == pytest.approx(h.winners["quant"].result["effect"])
    assert [e["id"] for e in led_to(db, source_id=h.sources["fork"])["experiments"]] == [h.exp["quant"]]
    blog = led_to(db, ref=BLOG_URL)
    assert [(e["id"], e["status"], e["winner_commit"]) for e in blog["experiments"]] == [
        (h.exp["prefetch"], "discarded", None)
    ]
    assert led_to(db, ref="https://nowhere.example/") == {"hypotheses": [], "experiments": []}
    with pytest.raises(UserError, match="exactly one"):
        led_to(db)
    with pytest.raises(UserError, match="evidence 999"):
        led_to(db, evidence_id=999)
