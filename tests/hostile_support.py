"""Outside text that tries to act on the operator's terminal (issue 29), put where it really comes
from: an imported log's descriptions and metric names, a fork's commit subjects and author names
(`kb add-fork` of a real repository), a model's hypothesis title (`generate` with a scripted
model), patch file names, a web server's status line, reason phrase and content type.

`PAYLOAD` writes the clipboard (OSC 52: "rm -rf ~"), sets the window title (OSC 0), clears the
screen (CSI 2J), hides text (SGR 8), reorders what is read (a bidi override), sends an 8-bit CSI
(C1) and carries Rich markup. Shown, it must come out visible and inert: `^[]52;c;...`, `[bold red]`.
`raw_sequences` finds what a terminal would act on in captured output.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kb.workspace import Workspace

PAYLOAD = (
    "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: the clipboard becomes "rm -rf ~"
    "\x1b]0;pwned-title\x07"  # OSC 0: the window title
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b[8mhidden\x1b[0m"  # concealed text
    "[bold red]markup[/bold red]"  # Rich markup
    "\u202eevil\u202c"  # a bidi override
    "\x9b31m"  # an 8-bit CSI
)
SHOWN = "^[]52;c;cm0gLXJmIH4K^G"
"""How the clipboard write must appear: visible, inert."""
MARKUP = "[bold red]markup[/bold red]"
"""Markup must appear as written, not as a style."""

# What a terminal acts on: ESC and everything it starts, BEL, C1 controls (as text and as the
# UTF-8 of U+0080..U+009F), bidi embeddings/overrides/isolates.
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_OWN_SGR = re.compile("\x1b\\[[0-9;]*m")  # the CLI's own bold (click.style) on a terminal


def raw_sequences(text: str, *, allow_sgr: bool = False) -> list[str]:
    """The controls in `text` a terminal would act on (with a little context), none when inert.
    `allow_sgr`: the CLI's own colour sequences (`ESC[1m`, `ESC[0m`) are not counted."""
    body = text.replace("\r\n", "\n")
    if allow_sgr:
        body = _OWN_SGR.sub("", body)
    return [repr(body[max(0, m.start() - 20) : m.end() + 20]) for m in _RAW.finditer(body)]


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})}
    ).stdout


@dataclass
class HostileFork:
    path: Path
    sha: str


def make_hostile_fork(target: Path, dest: Path, file: str) -> HostileFork:
    """A clone of `target` with one commit to `file`: its subject, body and author name hostile."""
    git(dest.parent, "clone", "-q", str(target), str(dest))
    path = dest / file
    path.write_text(path.read_text() + "/* faster */\n")
    git(dest, "add", "-A")
    author = {
        "GIT_AUTHOR_NAME": "Mallory \x1b]0;author-title\x07[red]x[/red]",
        "GIT_AUTHOR_EMAIL": "m@example.invalid",
        "GIT_COMMITTER_NAME": "Mallory",
        "GIT_COMMITTER_EMAIL": "m@example.invalid",
    }
    git(dest, "commit", "-q", "-m", f"faster {PAYLOAD}\n\nbody {PAYLOAD}", env=author)
    return HostileFork(dest, git(dest, "rev-parse", "HEAD").strip())


def hostile_log(path: Path) -> Path:
    """A pi-autoresearch log whose config name, metric names and descriptions are hostile."""
    lines: list[dict[str, object]] = [
        {"type": "config", "name": f"cfg {PAYLOAD}", "metricName": "tg", "bestDirection": "higher"},
        {"run": 1, "commit": "a1b2c3d", "metric": 40.0, "metrics": {f"pp{PAYLOAD}": 200.0}, "status": "keep",
         "description": f"baseline {PAYLOAD}", "timestamp": 1764660000},
        {"run": 2, "commit": "b2c3d4e", "metric": 44.0, "metrics": {f"pp{PAYLOAD}": 210.0}, "status": "keep",
         "description": f"prefetch {PAYLOAD}", "timestamp": 1764660900,
         "asi": {"hypothesis": f"asi {PAYLOAD}"}, "literature_source": f"note:{PAYLOAD}"},
        {"run": 3, "commit": "c3d4e5f", "metric": 39.0, "metrics": {}, "status": "discard",
         "description": f"unroll {PAYLOAD}", "timestamp": 1764661800},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def model_title_answer(evidence_id: int) -> tuple[str, str]:
    """A scripted model's two answers for `generate`: its queries, then one hostile hypothesis."""
    queries = json.dumps({"queries": ["faster"]})
    answer = json.dumps(
        {
            "hypotheses": [
                {
                    "title": f"Model: prefetch weight blocks into the second level cache ahead {PAYLOAD}",
                    "rationale": f"Because the fork says so, and it is memory-bound. {PAYLOAD}",
                    "expected_effect": 0.03,
                    "risk": f"none {PAYLOAD}",
                    "confidence": 0.5,
                    "cost": 1.0,
                    "evidence_ids": [evidence_id],
                }
            ]
        }
    )
    return queries, answer


@dataclass
class Hostile:
    ws: Workspace
    root: Path
    run: str
    """The imported run's name."""
    fork_sha: str
    commit_evidence: int
    imported_hypothesis: int
    model_hypothesis: int
    mined_hypothesis: int


def hostile_workspace(root: Path) -> Iterator[Hostile]:
    """One workspace holding hostile text from every source: an imported log, a fork added with
    `kb add-fork` and mined, a model's hypothesis (`generate` with a scripted model)."""
    import pytest

    from kb.db import one
    from kb.forks import add_fork
    from kb.init import TargetSpec, create_workspace
    from runner.llm import LLMClient, LLMConfig
    from runner.record.importer import import_jsonl
    from runner.research.generate import generate
    from runner.research.miners import mine
    from tests.conftest import GIT_ENV, make_repo

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        for key, value in GIT_ENV.items():
            mp.setenv(key, value)
        target = make_repo(root / "target", {"src/fast.c": "int fast(void) { return 1; }\n"})
        ws = create_workspace(root / "ws", TargetSpec(location=str(target)))
        db = ws.db()
        fork = make_hostile_fork(target, root / "fork", "src/fast.c")
        add_fork(ws, db, "evil", str(fork.path))
        commit = one(db, "SELECT id FROM evidence WHERE kind = 'commit' AND ref = ?", [fork.sha])
        assert commit is not None
        # The model first: its title would be merged into a near-duplicate (the payload's words).
        answers: list[str | BaseException] = list(model_title_answer(commit["id"]))
        client = LLMClient(db, LLMConfig(model="gpt-4o-mini"), mock_responses=answers)
        report = generate(ws, db, client, n=1)
        assert report.added, (report.rejected, report.merged)
        [model_id] = report.added
        mined = mine(ws, db)
        [mined_id] = mined.added["fork"]
        imported = import_jsonl(db, hostile_log(root / "autoresearch.jsonl"))
        first = one(
            db,
            "SELECT h.id FROM hypotheses h WHERE h.origin = 'import' ORDER BY h.id LIMIT 1",
        )
        assert first is not None
        yield Hostile(ws, root, imported[0].name, fork.sha, commit["id"], first["id"], model_id, mined_id)


class RawHTTPServer:
    """A server on 127.0.0.1 that answers every request with the bytes it is given (a hostile
    status line, reason phrase or content type no well-behaved server library would send)."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(self.response)
                except OSError:
                    pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/paper"

    def __enter__(self) -> RawHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._sock.close()


def hostile_responses() -> dict[str, bytes]:
    """Answers whose status line, reason phrase or content type carry the payload."""
    raw = PAYLOAD.encode("utf-8")
    return {
        "reason phrase": b"HTTP/1.1 503 " + raw + b"\r\nContent-Length: 0\r\n\r\n",
        "status line": b"HTTP/1.1 " + raw + b"\r\n\r\n",
        "content type": (
            b"HTTP/1.1 200 OK\r\nContent-Type: image/" + raw + b"\r\nContent-Length: 4\r\n\r\nGIF8"
        ),
    }
