"""Every bad input ends in one line naming the input and the reason, a non-zero exit, and the
database as it was: arguments, numbers, ids, files, the database file itself, locks, a read-only
workspace and the config. Through the real command line (a process, or click's runner in-process
where a test must shorten the busy timeout)."""

from __future__ import annotations

import gc
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.errors import UserError
from kb.workspace import Workspace
from tests.kb.helpers import db_dump
from tui.cli import main

EXE = [sys.executable, "-m", "tui.cli"]
HUGE = "999999999999999999999"  # beyond SQLite's int64
PATCH = (
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
    "@@ -1 +1 @@\n-target\n+target, faster\n"
)


def real_cli(
    ws: Workspace, *args: str | bytes, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), *EXE, "--workspace", str(ws.root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        errors="replace",
    )


def in_process(ws: Workspace, *args: str) -> tuple[int, str, str]:
    result = CliRunner(mix_stderr=False).invoke(main, ["--workspace", str(ws.root), *args])
    # A traceback would surface as an exception other than the SystemExit click ends with.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(code: int, stdout: str, stderr: str, want_code: int, *needles: str) -> str:
    assert code == want_code, (code, stdout, stderr)
    assert "Traceback" not in stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("Error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def state(ws: Workspace) -> tuple[list[str], list[str]]:
    """The database's rows and the workspace's top-level names: equal states, nothing changed."""
    # -wal and -shm come and go with connections.
    names = [n for n in os.listdir(ws.root) if not n.endswith(("-wal", "-shm"))]
    return db_dump(ws.db_path), sorted(names)


@pytest.fixture
def ws(workspace: Workspace, tmp_path: Path) -> Workspace:
    """A workspace with one queued hypothesis (so "unchanged" has rows to compare)."""
    patch = tmp_path / "speedup.diff"
    patch.write_text(PATCH)
    code, out, err = in_process(workspace, "queue", "add", str(patch), "-t", "first")
    assert code == 0, err
    gc.collect()  # close the in-process connections: the last one to close removes -wal and -shm
    assert not Path(f"{workspace.db_path}-wal").exists()
    return workspace


@pytest.fixture
def patch_file(tmp_path: Path) -> Path:
    path = tmp_path / "another.diff"
    path.write_text(PATCH)
    return path


# --- arguments and options ------------------------------------------------------------------------


def test_arguments_that_are_not_utf8(ws: Workspace, patch_file: Path) -> None:
    before = state(ws)
    cases: list[tuple[list[str | bytes], str]] = [
        (["kb", "search", b"ab\xffc"], r"'ab\xffc'"),
        (["kb", "search", b"\xff"], r"'\xff'"),
        (["queue", "add", str(patch_file), "-t", b"caf\xe9"], r"'caf\xe9'"),
        (["kb", "add-paper", b"/tmp/\xff.html"], r"'/tmp/\xff.html'"),
    ]
    for args, shown in cases:
        result = real_cli(ws, *args)
        assert_one_line(
            result.returncode, result.stdout, result.stderr, 1, f"argument {shown}", "not valid UTF-8"
        )
    assert state(ws) == before


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (
            ["queue", "add", "{patch}", "-t", "x", "--priority", "nan"],
            2,
            ["'--priority'", "'nan' is not a finite"],
        ),
        (
            ["queue", "add", "{patch}", "-t", "x", "--priority", "inf"],
            2,
            ["'--priority'", "'inf' is not a finite"],
        ),
        (["queue", "add", "{patch}", "-t", "x", "--priority", "-inf"], 2, ["'-inf' is not a finite"]),
        (["hypotheses", "prioritize", "1", "nan"], 2, ["'PRIORITY'", "not a finite"]),
        (["kb", "show", HUGE], 2, ["'EVIDENCE_ID'", HUGE]),
        (["hypotheses", "show", HUGE], 2, ["'HYPOTHESIS_ID'", HUGE]),
        (["hypotheses", "approve", "1", HUGE], 2, ["'IDS...'", HUGE]),
        (["hypotheses", "prioritize", HUGE, "1"], 2, [HUGE]),
        (["hypotheses", "reflect", HUGE], 2, ["'WAVE'", HUGE]),
        (["fleet", "status", "--run", HUGE], 2, ["'--run'", HUGE]),
        (["run", "--resume", "--run", HUGE], 2, ["'--run'", HUGE]),
        (["run", "--waves", HUGE], 2, ["'--waves'", HUGE]),
        (["run", "--budget-minutes", "nan"], 2, ["'--budget-minutes'", "not a finite"]),
        (["report", HUGE], 1, [f"run {HUGE}: no such run"]),
        (["history", "--run", HUGE], 1, [f"run {HUGE}: no such run"]),
        (["redecide", "1", "--alpha", "nan"], 2, ["'--alpha'", "not a finite"]),
        (["redecide", "1", "--max-pairs", "-1"], 2, ["'--max-pairs'", "-1"]),
        (["kb", "search", "x", "--limit", "-1"], 2, ["'--limit'", "-1 is not in the range"]),
        (["kb", "search", "x", "--limit", HUGE], 2, ["'--limit'"]),
        (["llm", "log", "-n", "0"], 2, ["'-n'"]),
        (["kb", "show", "-5"], 2, ["-5"]),
        (
            ["queue", "add", "{patch}", "-t", "x", "--source", f"gap:{HUGE}"],
            1,
            [f"--source gap:{HUGE}: no such"],
        ),
        (["kb", "add-paper", "http://[::1"], 1, ["http://[::1: not a valid URL (Invalid IPv6 URL)"]),
        (["kb", "add-paper", "http://127.0.0.1:99999/"], 1, ["99999/: not a valid URL (Port out of range"]),
        (["kb", "add-paper", "ftp://example.org/a.html"], 1, ["unsupported URL scheme 'ftp'"]),
        (["kb", "add-paper", ""], 2, ["'URL|FILE|DIR...'", "must not be empty"]),
        (["kb", "add-paper", "  "], 2, ["must not be empty"]),
        (["kb", "add-fork", "x", ""], 2, ["'[URL|PATH]'", "must not be empty"]),
        (["kb", "commits", ""], 2, ["must not be empty"]),
        (["kb", "inventory", ""], 2, ["'[PATH]'", "must not be empty"]),
        (["report", ""], 2, ["'RUN'", "must not be empty"]),
        (["run", "--name", ""], 2, ["'--name'", "must not be empty"]),
        (["queue", "add", "{patch}", "-t", "  "], 1, ["--title: must not be empty"]),
        (["queue", "add", "{dir}", "-t", "x"], 2, ["'PATCH_FILE'", "is a directory"]),
        (["import", "{dir}"], 2, ["'FILE'", "is a directory"]),
        (["queue", "add", "{fifo}", "-t", "x"], 1, ["{fifo}: a FIFO, not a regular file"]),
        (["queue", "add", "/dev/zero", "-t", "x"], 1, ["/dev/zero: a character device"]),
        (["queue", "add", "{latin1}", "-t", "x"], 1, ["{latin1}: not UTF-8 text (byte 3)"]),
        (["import", "{latin1}"], 1, ["{latin1}: not UTF-8 text"]),
        (["analyze", "--baseline", "{latin1}", "--candidate", "{latin1}"], 1, ["{latin1}: not UTF-8 text"]),
        (["analyze", "--batch", "{fifo}"], 1, ["a FIFO"]),
        (
            ["analyze", "--baseline", "{patch}", "--candidate", "{patch}", "--min-effect", "inf"],
            2,
            ["not a finite"],
        ),
        (["tui", "--serve", "--public-url", "console.example"], 2, ["'--public-url'", "http(s)://HOST"]),
    ],
)
def test_bad_values_are_one_line_and_change_nothing(
    ws: Workspace, patch_file: Path, tmp_path: Path, args: list[str], code: int, needles: list[str]
) -> None:
    fifo = tmp_path / "fifo.diff"
    os.mkfifo(fifo)
    latin1 = tmp_path / "latin1.diff"
    latin1.write_bytes("café\n".encode("latin-1"))
    (tmp_path / "folder").mkdir()
    names = {
        "patch": str(patch_file),
        "dir": str(tmp_path / "folder"),
        "fifo": str(fifo),
        "latin1": str(latin1),
    }
    before = state(ws)
    line = assert_one_line(*in_process(ws, *(a.format(**names) for a in args)), code)
    for needle in needles:
        assert needle.format(**names) in line, line
    assert state(ws) == before


def test_usage_errors_are_one_line_with_where_help_is(ws: Workspace) -> None:
    result = real_cli(ws, "queue", "add", "--priority", "nan")
    line = assert_one_line(
        result.returncode, result.stdout, result.stderr, 2, "(see autoresearch queue add -h)"
    )
    assert "'nan' is not a finite number" in line


# --- the database file ------------------------------------------------------------------------------


def _remove_db(ws: Workspace) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ws.db_path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("missing", "the database is missing but its folder still holds autoresearch.toml, logs, mirror.git"),
        ("directory", "a directory, not a database file"),
        ("empty", "the database is empty (0 bytes)"),
        ("replaced", "not a workspace database (no autoresearch schema in it)"),
        ("garbage", "not a usable SQLite database"),
    ],
)
def test_a_missing_or_replaced_database_is_an_error_not_a_new_one(
    ws: Workspace, patch_file: Path, kind: str, needle: str
) -> None:
    _remove_db(ws)
    if kind == "directory":
        ws.db_path.mkdir()
    elif kind == "empty":
        ws.db_path.write_bytes(b"")
    elif kind == "replaced":
        conn = sqlite3.connect(ws.db_path)
        conn.execute("CREATE TABLE notes (text)")
        conn.commit()
        conn.close()
    elif kind == "garbage":
        ws.db_path.write_bytes(b"not a database " * 100)
    listing = sorted(os.listdir(ws.root))
    content = ws.db_path.read_bytes() if ws.db_path.is_file() else None
    for args in (["kb", "papers"], ["queue", "add", str(patch_file), "-t", "x"], ["hypotheses", "list"]):
        result = real_cli(ws, *args)
        line = assert_one_line(result.returncode, result.stdout, result.stderr, 1, str(ws.db_path), needle)
        if kind != "garbage":
            assert "restore it from a backup, or start a new workspace with `autoresearch init`" in line
    assert sorted(os.listdir(ws.root)) == listing  # no database (nor -wal, -shm) was created
    assert (ws.db_path.read_bytes() if ws.db_path.is_file() else None) == content
    if kind == "directory":
        assert ws.db_path.is_dir() and not list(ws.db_path.iterdir())


def test_the_console_does_not_create_a_missing_database(ws: Workspace) -> None:
    from tui.data import Store

    _remove_db(ws)
    with pytest.raises(UserError, match="the database is missing"), Store(ws.root).session():
        pass
    assert not ws.db_path.exists()


@pytest.fixture
def locker(ws: Workspace) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the database's write lock (BEGIN EXCLUSIVE) until it is stopped."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(120)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(ws.db_path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    yield process
    process.terminate()
    process.wait(10)


def test_a_lock_held_past_the_busy_timeout_is_one_line(
    ws: Workspace, patch_file: Path, locker: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = state(ws)  # readers are not blocked (WAL), so this reads while the lock is held
    monkeypatch.setattr("kb.db.BUSY_TIMEOUT_MS", 300)  # the real one is 30 s
    for args in (["queue", "add", str(patch_file), "-t", "x"], ["hypotheses", "approve", "1"]):
        assert_one_line(
            *in_process(ws, *args), 1, str(ws.db_path), "locked by another process for more than 0.3 s"
        )
    code, out, _err = in_process(ws, "queue", "list")  # reading still works meanwhile
    assert code == 0 and "first" in out
    locker.terminate()
    locker.wait(10)
    assert state(ws) == before


READ_ONLY = 'mount --bind "$WS" "$WS" && mount -o remount,bind,ro "$WS" "$WS" && exec "$@"'


def read_only_prefix(ws: Workspace) -> list[str]:
    """Run the command in a mount namespace where the workspace is a read-only bind mount (root
    ignores file modes, so chmod -w would prove nothing)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here ({probe.stderr.strip()!r})")
    return ["env", f"WS={ws.root}", "unshare", "-m", "sh", "-c", READ_ONLY, "sh"]


def test_a_read_only_workspace_is_one_line(ws: Workspace, patch_file: Path) -> None:
    prefix = read_only_prefix(ws)
    before = state(ws)
    content = ws.db_path.read_bytes()
    for args in (
        ["queue", "add", str(patch_file), "-t", "x"],
        ["kb", "papers"],
        ["hypotheses", "approve", "1"],
    ):
        result = real_cli(ws, *args, prefix=prefix)
        assert_one_line(result.returncode, result.stdout, result.stderr, 1, str(ws.db_path), "read-only")
    assert ws.db_path.read_bytes() == content
    assert state(ws) == before


# --- the config -----------------------------------------------------------------------------------


def set_key(config: Path, section: str, key: str, value: str) -> None:
    """Set `key = value` in `[section]` of a TOML file written by dump_settings (as TOML text)."""
    text = config.read_text()
    start = text.index(f"[{section}]\n") + len(f"[{section}]\n")
    end = text.find("\n[", start)
    end = len(text) if end == -1 else end + 1
    body = text[start:end]
    line = f"{key} = {value}\n"
    body, found = re.subn(rf"(?m)^{re.escape(key)} = .*\n", line, body)
    config.write_text(text[:start] + (body if found else line + body) + text[end:])


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        (
            "kb",
            "max_page_bytes",
            "-1",
            "kb.max_page_bytes: Input should be greater than or equal to 1 (got -1)",
        ),
        ("fleet", "parallel", "true", "fleet.parallel: Input should be a valid integer (got true)"),
        ("fleet", "parallel", "2.0", "fleet.parallel: Input should be a valid integer (got 2.0)"),
        ("fleet", "parallel", '"4"', 'fleet.parallel: Input should be a valid integer (got "4")'),
        (
            "fleet",
            "parallel",
            "99999999999999999999",
            "fleet.parallel: 99999999999999999999 is too large",
        ),
        ("policy", "min_effect", "nan", "policy.min_effect: Input should be a finite number (got nan)"),
        ("budget", "minutes", "inf", "budget.minutes: Input should be a finite number (got inf)"),
        ("budget", "usd", "-1.0", "budget.usd: Input should be greater than 0"),
        ("timeouts", "build", "99999999999", "timeouts.build: Input should be less than or equal to 2592000"),
        ("llm", "temperature", "-0.5", "llm.temperature: Input should be greater than or equal to 0"),
        ("llm", "max_retries", "false", "llm.max_retries: Input should be a valid integer (got false)"),
        ("kb", "fetch_timeout", "0", "kb.fetch_timeout: Input should be greater than 0"),
        (
            "hypotheses",
            "require_approval",
            "1",
            "hypotheses.require_approval: Input should be a valid boolean",
        ),
    ],
)
def test_config_values_are_checked_strictly(
    ws: Workspace, section: str, key: str, value: str, message: str
) -> None:
    set_key(ws.config_path, section, key, value)
    before = state(ws)
    line = assert_one_line(*in_process(ws, "kb", "papers"), 1)
    assert line.startswith(f"Error: {ws.config_path}: {message}"), line
    assert state(ws) == before
