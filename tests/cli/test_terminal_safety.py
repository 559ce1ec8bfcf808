"""Outside text never reaches the operator's terminal raw (issue 29): every path the issue names,
through a real pty running the installed `autoresearch` command. An OSC 52 clipboard write, an
OSC 0 title, a screen clear, hidden text, a bidi override, an 8-bit CSI and Rich markup come out
visible and inert (`^[]52;c;...`); the database keeps what came in."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb.db import one
from kb.workspace import Workspace
from tests.hostile_support import (
    MARKUP,
    PAYLOAD,
    SHOWN,
    Hostile,
    RawHTTPServer,
    hostile_log,
    hostile_responses,
    hostile_workspace,
    raw_sequences,
)

AUTORESEARCH = Path(sys.executable).with_name("autoresearch")


def on_terminal(ws: Workspace, *args: str, timeout: float = 120) -> tuple[int, str]:
    """Run the installed command on a pseudo-terminal (stdout and stderr both): what it printed."""
    argv = [str(AUTORESEARCH)] if AUTORESEARCH.exists() else [sys.executable, "-m", "tui.cli"]
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    proc = subprocess.Popen(
        [*argv, "--workspace", str(ws.root), *args], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def assert_inert(out: str, *, shown: str | None = SHOWN) -> None:
    found = raw_sequences(out, allow_sgr=True)
    assert not found, f"raw control sequences reached the terminal: {found[:5]}\n{out[-2000:]}"
    assert "Traceback" not in out, out[-3000:]
    if shown is not None:
        assert shown in out, out[-3000:]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    yield from hostile_workspace(tmp_path_factory.mktemp("hostile"))


def test_the_database_keeps_what_came_in(hostile: Hostile) -> None:
    db = hostile.ws.db()
    subject = one(db, "SELECT subject, author FROM commits WHERE sha = ?", [hostile.fork_sha])
    assert (
        subject is not None and PAYLOAD in subject["subject"] and "\x1b]0;author-title" in subject["author"]
    )
    model = one(db, "SELECT title FROM hypotheses WHERE id = ?", [hostile.model_hypothesis])
    assert model is not None and "\x1b]52;c;" in model["title"]


# --- an imported log's descriptions and metric names -----------------------------------------------


def test_import_prints_the_log_inert(hostile: Hostile, tmp_path: Path) -> None:
    code, out = on_terminal(hostile.ws, "import", str(hostile_log(tmp_path / "again.jsonl")))
    assert code == 0, out
    assert_inert(out, shown=None)  # the run's name is a slug of the log's


def contains(data: object, text: str) -> bool:
    if isinstance(data, str):
        return text in data
    if isinstance(data, dict):
        return any(contains(k, text) or contains(v, text) for k, v in data.items())
    if isinstance(data, list):
        return any(contains(v, text) for v in data)
    return False


@pytest.mark.parametrize(
    "args",
    [
        ("history",),
        ("history", "--run", "{run}"),
        ("history", "--run", "{run}", "--samples"),
        ("redecide", "{run}"),
        ("hypotheses", "list"),
        ("hypotheses", "show", "{imported}"),
        ("history", "--run", "{run}", "--json"),
        ("hypotheses", "list", "--json"),
    ],
    ids=lambda a: " ".join(a),
)
def test_imported_text_is_inert(hostile: Hostile, args: tuple[str, ...]) -> None:
    filled = [a.format(run=hostile.run, imported=hostile.imported_hypothesis) for a in args]
    code, out = on_terminal(hostile.ws, *filled)
    assert code == 0, out
    assert_inert(out, shown=None if "--json" in args or args == ("history",) else "^[]52;c;")
    if "--json" in args:
        data = json.loads(out)  # JSON escapes every control character; the text is kept exactly
        assert contains(data, PAYLOAD)


# --- fork commit subjects and author names -------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("kb", "commits", "evil"),
        ("kb", "search", "--kind", "commit", "faster"),
        ("kb", "show", "{commit}"),
        ("hypotheses", "list"),
        ("hypotheses", "show", "{mined}"),
        ("kb", "show", "{commit}", "--json"),
    ],
    ids=lambda a: " ".join(a),
)
def test_fork_commit_text_is_inert(hostile: Hostile, args: tuple[str, ...]) -> None:
    filled = [a.format(commit=hostile.commit_evidence, mined=hostile.mined_hypothesis) for a in args]
    code, out = on_terminal(hostile.ws, *filled)
    assert code == 0, out
    assert_inert(out, shown=None if "--json" in args else "^[]")
    if "--json" in args:
        assert contains(json.loads(out), PAYLOAD)
    if args[:2] == ("kb", "show") and "--json" not in args:
        assert SHOWN in out and MARKUP in out and "Mallory ^[]0;author-title^G[red]x[/red]" in out


# --- a model's hypothesis title -------------------------------------------------------------------


@pytest.mark.parametrize("args", [("hypotheses", "list"), ("hypotheses", "show", "{model}")], ids=" ".join)
def test_a_model_title_is_inert(hostile: Hostile, args: tuple[str, ...]) -> None:
    code, out = on_terminal(hostile.ws, *[a.format(model=hostile.model_hypothesis) for a in args])
    assert code == 0, out
    assert_inert(out, shown="^[]52;c;")
    assert "Model: prefetch weight blocks" in out


# --- patch file names with escapes or newlines ----------------------------------------------------


def test_a_patch_file_name_is_inert(hostile: Hostile, tmp_path: Path) -> None:
    name = "x\x1b]0;file-title\x07\nkept: exp 1 +99%\x1b[2J.patch"
    patch = tmp_path / name
    patch.write_text(
        "diff --git a/src/fast.c b/src/fast.c\n--- a/src/fast.c\n+++ b/src/fast.c\n"
        "@@ -1 +1 @@\n-int fast(void) { return 1; }\n+int fast(void) { return 2; }\n"
    )
    code, out = on_terminal(hostile.ws, "queue", "add", str(patch), "-t", f"title {PAYLOAD}")
    assert code == 0, out
    assert_inert(out, shown="title ^[]52;c;")
    added = one(hostile.ws.db(), "SELECT hypothesis_id, author FROM patches ORDER BY id DESC LIMIT 1")
    assert added is not None and added["author"] == name  # stored as it came
    code, out = on_terminal(hostile.ws, "hypotheses", "show", str(added["hypothesis_id"]))
    assert code == 0, out
    assert_inert(out, shown="x^[]0;file-title^G^Jkept: exp 1 +99%^[[2J.patch")
    # The same file again is refused: one line, the name in it inert (its newline too).
    code, out = on_terminal(hostile.ws, "queue", "add", str(patch), "-t", "again")
    assert code == 1, out
    assert len(out.strip().splitlines()) == 1, out
    assert_inert(out, shown="x^[]0;file-title^G^Jkept: exp 1 +99%^[[2J.patch: the same change")


# --- a web server's status line, reason phrase and content type -----------------------------------


@pytest.mark.parametrize("case", sorted(hostile_responses()))
def test_a_web_server_reply_is_inert_in_add_paper_errors(hostile: Hostile, case: str) -> None:
    with RawHTTPServer(hostile_responses()[case]) as server:
        url = server.url
        code, out = on_terminal(hostile.ws, "kb", "add-paper", url)
    assert code == 1, out
    lines = [line for line in out.replace("\r\n", "\n").splitlines() if line.strip()]
    assert len(lines) == 1 and url in lines[0], out
    assert_inert(out, shown="^[]")


def test_the_pty_sees_raw_text_when_nothing_cleans_it(hostile: Hostile, tmp_path: Path) -> None:
    """The check itself: the same payload printed by a plain process reaches the pty raw."""
    script = tmp_path / "raw.py"
    script.write_text(f"print({PAYLOAD!r})\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(script)], stdout=slave, stderr=slave)
    os.close(slave)
    proc.wait(timeout=30)
    data = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    assert raw_sequences(data.decode("utf-8", errors="replace"))
    assert shutil.which("git")  # the fixtures' repositories are real
