"""Opt-in: a real model behind litellm, offline. The recipe's tree builds llama-server, which serves
the recipe's Gemma 3 270M GGUF on 127.0.0.1; `hypotheses generate` runs the research phase against it
through litellm (`--model openai/... --api-base ...`) with the answer schema sent as response_format,
which llama-server turns into a grammar. A 270M model writes poor hypotheses: the point is the real
path, and that cut-off or invalid answers end in a one-line error with every attempt logged and no
hypothesis half-stored.

    AUTORESEARCH_LLAMACPP=1 .venv/bin/pytest -m llamacpp tests/llamacpp/test_llama_server_llm.py -s
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb.config import Settings
from runner.recipes.llamacpp import SERVER_BUILD_CMD
from tests.llamacpp.recipe_support import OPT_IN, build_clone, init_recipe, recipe_env

pytestmark = [pytest.mark.llamacpp, OPT_IN, pytest.mark.timeout(3600)]  # builds llama.cpp: up to 25 min

MODEL = "openai/gemma-3-270m"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"llama-server exited {server.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass  # still loading the model (503) or not listening yet
        time.sleep(0.5)
    pytest.fail(f"llama-server not healthy after {timeout:.0f} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Settings, str]]:
    """(workspace, settings, API base) with llama-server serving the recipe's model."""
    root = tmp_path_factory.mktemp("llama-server")
    ws = root / "ws"
    settings = init_recipe(ws)
    tree = root / "tree"
    started = time.monotonic()
    build_clone(settings, tree, SERVER_BUILD_CMD)
    print(f"\nllama-server built in {time.monotonic() - started:.0f} s")
    # Evidence for the research prompt: the tree's backend inventory (fusion gaps of the CPU backend).
    kb = _cli(ws, "kb", "inventory", str(tree))
    assert kb.returncode == 0, kb.stderr

    port = _free_port()
    log = root / "llama-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                str(tree / "build" / "bin" / "llama-server"),
                "-m",
                settings.target.env["AUTORESEARCH_GGUF"],
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "16384",
                "-t",
                "2",
                "-np",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield ws, settings, f"{url}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--workspace", str(ws), *args],
        capture_output=True,
        text=True,
        env=recipe_env(),
        timeout=1800,
    )


def _set_max_tokens(ws: Path, limit: int) -> None:
    config = ws / "autoresearch.toml"
    text = re.sub(r"(?m)^max_tokens = \d+\n", "", config.read_text())
    config.write_text(text.replace("[llm]\n", f"[llm]\nmax_tokens = {limit}\n", 1))


def _query(ws: Path, sql: str, *params: Any) -> list[sqlite3.Row]:
    with sqlite3.connect(ws / "autoresearch.db") as con:
        con.row_factory = sqlite3.Row
        return list(con.execute(sql, params))


def _generate(ws: Path, api_base: str) -> subprocess.CompletedProcess[str]:
    return _cli(ws, "hypotheses", "generate", "--n", "2", "--model", MODEL, "--api-base", api_base, "--json")


def test_research_phase_through_litellm_against_llama_server(served: tuple[Path, Settings, str]) -> None:
    ws, _, api_base = served
    _set_max_tokens(ws, 2048)
    before = _query(ws, "SELECT count(*) AS n FROM hypotheses")[0]["n"]
    started = time.monotonic()
    result = _generate(ws, api_base)
    print(
        f"\nhypotheses generate: exit {result.returncode} in {time.monotonic() - started:.0f} s\n"
        f"{result.stdout[-1500:]}{result.stderr[-600:]}"
    )

    calls = _query(ws, "SELECT * FROM llm_calls ORDER BY id")
    assert calls, "no llm call logged"
    assert {c["model"] for c in calls} == {MODEL}
    assert all(c["api_base"] == api_base for c in calls)
    # The first call is the query plan; the grammar makes even a 270M model answer valid JSON.
    plan = calls[0]
    assert plan["purpose"] == "queries" and plan["error"] is None, plan["error"]
    assert json.loads(plan["response"])["queries"]
    assert plan["input_tokens"] and plan["output_tokens"]
    for call in calls:  # every answer was either accepted or rejected with a reason
        assert call["response"] or call["error"]

    added = _query(ws, "SELECT * FROM hypotheses WHERE origin = 'llm' ORDER BY id")
    if result.returncode == 0:
        report = json.loads(result.stdout)
        assert [h["id"] for h in added] == report["added"]
        for hypothesis in added:
            assert len(hypothesis["title"]) >= 5
            links = _query(ws, "SELECT * FROM hypothesis_evidence WHERE hypothesis_id = ?", hypothesis["id"])
            assert links, f"hypothesis {hypothesis['id']} has no provenance"
    else:  # the model never produced a valid answer: a one-line error, nothing stored
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "gave no valid answer" in result.stderr
        assert _query(ws, "SELECT count(*) AS n FROM hypotheses")[0]["n"] == before


def test_cut_off_answers_fail_cleanly(served: tuple[Path, Settings, str]) -> None:
    ws, _, api_base = served
    _set_max_tokens(ws, 6)  # no JSON answer fits in 6 tokens
    before_calls = _query(ws, "SELECT max(id) AS id FROM llm_calls")[0]["id"] or 0
    before = _query(ws, "SELECT count(*) AS n FROM hypotheses")[0]["n"]
    result = _generate(ws, api_base)
    assert result.returncode == 1
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1, error
    assert "gave no valid answer" in error and "cut off at the token limit (6)" in error, error
    calls = _query(ws, "SELECT * FROM llm_calls WHERE id > ? ORDER BY id", before_calls)
    assert len(calls) == 3  # the first answer and two retries, each told it was cut off
    assert all("cut off at the token limit (6)" in c["error"] for c in calls)
    assert all(c["output_tokens"] <= 6 for c in calls)
    assert _query(ws, "SELECT count(*) AS n FROM hypotheses")[0]["n"] == before


def test_one_autopilot_wave_against_llama_server(served: tuple[Path, Settings, str]) -> None:
    """The whole loop with a real (tiny) model: it may propose nothing valid; the run must say so
    in its research phase's record and end with a stop reason, not hang or fail."""
    ws, _, api_base = served
    _set_max_tokens(ws, 2048)
    result = _cli(
        ws, "run", "--autopilot", "--waves", "1", "--model", MODEL, "--api-base", api_base,
        "--skip-self-test", "--no-final", "--skip-validate", "--json",
    )  # fmt: skip
    print(f"\nrun --autopilot: exit {result.returncode}\n{result.stderr[-3000:]}")
    assert result.returncode == 0, result.stderr[-2000:]
    run = _query(ws, "SELECT * FROM runs ORDER BY id DESC LIMIT 1")[0]
    assert run["status"] == "finished" and run["stop_reason"] in ("waves", "no_hypotheses", "plateau")
    phases = _query(
        ws, "SELECT message, data FROM events WHERE kind = 'research_done' AND run_id = ?", run["id"]
    )
    assert phases, "no research phase recorded"
    report = json.loads(phases[0]["data"])
    assert report["call_ids"], "the research phase made no model call"
    if run["stop_reason"] == "no_hypotheses":
        assert report["generated"] == 0 or report["failures"], phases[0]["message"]
