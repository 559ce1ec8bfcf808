"""Reusable pieces for knowledge-base tests: a loopback HTTP server, HTML pages with real page
chrome around the article, git repositories (an upstream and its forks) built commit by commit,
and a database snapshot to prove bad input changed nothing.

Import from other test folders as `from tests.kb.helpers import ...`; tests/kb/conftest.py wraps
them as fixtures (`http_server`, `kb_ws`, `fork_repos`).
"""

from __future__ import annotations

import html
import os
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kb.workspace import Workspace

# --- HTTP on 127.0.0.1 ----------------------------------------------------------------------------


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    """None sends no Content-Type header at all."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (timeouts)."""
    stream_bytes: int = 0
    """Send this many filler bytes after `body`, with no Content-Length (size cap while streaming)."""
    send_length: bool = True
    redirect: str | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        if route.delay:
            time.sleep(route.delay)
        try:
            if route.redirect is not None:
                self.send_response(route.status if route.status in (301, 302, 303, 307, 308) else 302)
                self.send_header("Location", route.redirect)
                self.end_headers()
                return
            self.send_response(route.status)
            if route.content_type is not None:
                self.send_header("Content-Type", route.content_type)
            for key, value in route.headers.items():
                self.send_header(key, value)
            if route.send_length and not route.stream_bytes and "Content-Length" not in route.headers:
                self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            self.wfile.write(route.body)
            sent = 0
            filler = b"<p>" + b"x" * 65_000 + b"</p>\n"
            while sent < route.stream_bytes:
                self.wfile.write(filler)
                sent += len(filler)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (size cap): expected

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]
    requests: list[str]


class LoopbackServer:
    """An HTTP server on 127.0.0.1 in a thread; add routes, then fetch `url(path)`."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.routes = {}
        self._server.requests = []
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, path: str, body: bytes | str = b"", **options: object) -> str:
        data = body.encode() if isinstance(body, str) else body
        self._server.routes[path] = Route(body=data, **options)  # type: ignore[arg-type]
        return self.url(path)


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- HTML pages with chrome ------------------------------------------------------------------------

CHROME_TEXT = ("Accept all cookies", "Related posts", "All rights reserved", "Subscribe to our newsletter")


def article_page(
    title: str,
    sections: Sequence[tuple[str, Sequence[str]]],
    *,
    lang: str = "en",
    author: str = "Jane Doe",
    date: str = "2025-03-04",
    site: str = "Example Blog",
    canonical: str | None = None,
    charset: str | None = "utf-8",
    code: str | None = None,
) -> str:
    """A blog-style page: navigation, cookie banner, sidebar and footer around one <article>.

    Paragraph text is HTML-escaped; `code` goes into a <pre><code> block after the first section."""
    head = [
        f"<title>{html.escape(title)} | {html.escape(site)}</title>",
        f'<meta name="author" content="{html.escape(author)}">',
        f'<meta property="article:published_time" content="{date}">',
        f'<meta property="og:site_name" content="{html.escape(site)}">',
    ]
    if charset:
        head.insert(0, f'<meta charset="{charset}">')
    if canonical:
        head.append(f'<link rel="canonical" href="{canonical}">')
    body = [f"<h1>{html.escape(title)}</h1>"]
    for index, (heading, paragraphs) in enumerate(sections):
        body.append(f"<h2>{html.escape(heading)}</h2>")
        body.extend(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        if index == 0 and code:
            body.append(f"<pre><code>{html.escape(code)}</code></pre>")
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head>{"".join(head)}</head>
<body>
<nav class="navbar"><a href="/">Home</a> <a href="/archive">Archive</a> <a href="/about">About us</a></nav>
<div class="cookie-banner" id="cookie-consent"><p>We use cookies to improve your experience.
<button>Accept all cookies</button></p></div>
<div class="wrapper">
<aside class="sidebar"><h3>Related posts</h3><ul><li><a href="/p/1">Another post about caches</a></li>
<li><a href="/p/2">Yet another post</a></li></ul><p>Subscribe to our newsletter</p></aside>
<main><article>
{chr(10).join(body)}
</article></main>
</div>
<footer class="site-footer"><p>Copyright 2025 Example Inc. All rights reserved.</p>
<a href="/privacy">Privacy</a></footer>
</body></html>
"""


ENGLISH_SECTIONS: list[tuple[str, list[str]]] = [
    (
        "Background",
        [
            "The scheduler calls ggml_can_fuse before it merges two graph nodes into a single kernel. "
            "Quantized weights in the Q4_0_8x8 layout are repacked so that AVX2 code can use "
            "_mm256_fmadd_ps on eight lanes at once, which keeps the arithmetic units busy.",
            "Memory bandwidth, not arithmetic, bounds token generation on most desktop CPUs, so any "
            "fusion that avoids writing an intermediate tensor back to memory pays off directly.",
        ],
    ),
    (
        "Results",
        [
            "Fusing RMS_NORM with the following MUL saved one full pass over the activations and gave "
            "a three percent gain in tokens per second across the models we measured on a laptop.",
        ],
    ),
]

RUSSIAN_SECTIONS: list[tuple[str, list[str]]] = [
    (
        "Введение",
        [
            "Оптимизация умножения матриц на центральном процессоре упирается в пропускную способность "
            "памяти. Мы объединяем нормализацию RMS_NORM и последующее умножение в одно ядро, чтобы не "
            "записывать промежуточный тензор обратно в память.",
        ],
    ),
    (
        "Результаты",
        [
            "Слияние операций дало прирост скорости генерации на три процента. Ещё одна ёмкая идея: "
            "квантизация весов в формате Q4_0_8x8 ускоряет загрузку данных из кэша.",
        ],
    ),
]


# --- git repositories ----------------------------------------------------------------------------

_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Fork Author",
    "GIT_AUTHOR_EMAIL": "fork@example.invalid",
    "GIT_COMMITTER_NAME": "Fork Author",
    "GIT_COMMITTER_EMAIL": "fork@example.invalid",
}
_T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


class GitRepo:
    """A real repository built commit by commit, with increasing, fixed dates."""

    _clock = 0

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init(cls, path: Path, branch: str = "main") -> GitRepo:
        path.mkdir(parents=True, exist_ok=True)
        repo = cls(path)
        repo.git("init", "-q", "-b", branch)
        return repo

    @classmethod
    def clone(cls, source: GitRepo, path: Path) -> GitRepo:
        subprocess.run(["git", "clone", "-q", str(source.path), str(path)], check=True, capture_output=True)
        return cls(path)

    def git(self, *args: str, author: str | None = None) -> str:
        GitRepo._clock += 60
        stamp = f"@{_T0 + GitRepo._clock} +0000"
        env = {**os.environ, **_GIT_IDENTITY, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        if author:
            env["GIT_AUTHOR_NAME"] = author
        result = subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace')}")
        return result.stdout.decode(errors="replace").strip()

    def commit(
        self,
        message: str,
        files: dict[str, str | bytes] | None = None,
        *,
        delete: Sequence[str] = (),
        author: str | None = None,
    ) -> str:
        for name, content in (files or {}).items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        for name in delete:
            (self.path / name).unlink()
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message, author=author)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def cherry_pick(self, sha: str) -> str:
        self.git("cherry-pick", "--allow-empty", sha)
        return self.head()


OPS_C = "\n".join(f"void op_{i}(float * x) {{ x[{i}] += {i}; }}" for i in range(40)) + "\n"
VEC_H = "\n".join(f"#define VEC_WIDTH_{i} {i * 4}" for i in range(30)) + "\n"


@dataclass
class ForkRepos:
    """An upstream target and a fork of it, after both moved on from the fork point.

    Fork-only commits, oldest first: `fuse` (a CPU kernel change with ggml_can_fuse, a body line),
    `shared` (later cherry-picked upstream, so upstreamed), `binary` (a binary file), `huge` (a
    200 kB generated table), `docs` (outside ggml/). Upstream, after the fork point: an unrelated
    commit and the cherry-pick of `shared`."""

    upstream: GitRepo
    fork: GitRepo
    fork_point: str
    shas: dict[str, str]


def build_fork_repos(root: Path) -> ForkRepos:
    upstream = GitRepo.init(root / "upstream")
    upstream.commit(
        "Initial import",
        {"ggml/src/ggml-cpu/ops.c": OPS_C, "ggml/include/vec.h": VEC_H, "README.md": "target\n"},
    )
    upstream.commit("Add docs", {"docs/build.md": "how to build\n"})
    fork_point = upstream.head()
    fork = GitRepo.clone(upstream, root / "fork")
    shas: dict[str, str] = {}
    shas["fuse"] = fork.commit(
        "ggml-cpu: fuse RMS_NORM and MUL",
        {"ggml/src/ggml-cpu/ops.c": OPS_C + "bool fused(void) { return ggml_can_fuse(cgraph, i, 2); }\n"},
    )
    fork.git(
        "commit",
        "-q",
        "--amend",
        "-m",
        "ggml-cpu: fuse RMS_NORM and MUL\n\n"
        "Saves a pass over the activations: +3% tg on AVX2.\nSecond line of the body.",
    )
    shas["fuse"] = fork.head()
    shas["shared"] = fork.commit(
        "vec: widen VEC_WIDTH_3",
        {"ggml/include/vec.h": VEC_H.replace("#define VEC_WIDTH_3 12", "#define VEC_WIDTH_3 16")},
    )
    shas["binary"] = fork.commit("models: add test weights", {"models/tiny.bin": bytes(range(256)) * 8})
    shas["huge"] = fork.commit(
        "ggml-cpu: add generated lookup table",
        {
            "ggml/src/ggml-cpu/table.c": "".join(
                f"const int t{i} = {i * 7919 % 104729};\n" for i in range(8000)
            ),
        },
    )
    shas["docs"] = fork.commit("docs: explain the fork", {"docs/fork.md": "this fork fuses kernels\n"})
    upstream.commit("Unrelated upstream change", {"README.md": "target, improved\n"})
    upstream.git("fetch", "-q", str(fork.path), "main:fork-main")
    upstream.cherry_pick(shas["shared"])
    upstream.git("branch", "-q", "-D", "fork-main")
    return ForkRepos(upstream=upstream, fork=fork, fork_point=fork_point, shas=shas)


# --- proving the database did not change ----------------------------------------------------------


def db_dump(path: Path) -> list[str]:
    """Every row of every table (FTS shadow tables included), as SQL text: equal dumps, equal data."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def set_kb_settings(ws: Workspace, **values: object) -> Workspace:
    """Change `[kb]` settings in a workspace's autoresearch.toml; returns a fresh Workspace."""
    from kb.config import dump_settings, load_settings

    settings = load_settings(ws.config_path)
    kb = settings.kb.model_copy(update=values)
    ws.config_path.write_text(dump_settings(settings.model_copy(update={"kb": kb})), encoding="utf-8")
    return Workspace(ws.root)


def rewritten_copy(source: GitRepo, path: Path, upto: str) -> tuple[GitRepo, dict[str, str]]:
    """A repository with the trees and messages of `source`'s first-parent commits up to `upto`, every
    commit rewritten (new dates), so it shares no commit with `source`: ik_llama.cpp's history.

    Returns the copy (branch main at the copy of `upto`) and {source sha: its copy's sha}."""
    copy = GitRepo.init(path)
    copy.git("fetch", "-q", str(source.path), "+refs/heads/*:refs/source/*")
    copies: dict[str, str] = {}
    parent: str | None = None
    for sha in source.git("rev-list", "--reverse", "--first-parent", upto).split():
        tree = copy.git("rev-parse", f"{sha}^{{tree}}")
        message = copy.git("log", "-1", "--format=%B", sha)
        parent = copy.git("commit-tree", tree, "-m", message, *(["-p", parent] if parent else []))
        copies[sha] = parent
    assert parent is not None
    copy.git("update-ref", "refs/heads/main", parent)
    copy.git("reset", "-q", "--hard", "main")
    for ref in copy.git("for-each-ref", "--format=%(refname)", "refs/source/").split():
        copy.git("update-ref", "-d", ref)
    return copy, copies


def set_target_settings(ws: Workspace, **values: object) -> Workspace:
    """Change `[target]` settings (e.g. paths_of_interest); returns a fresh Workspace."""
    from kb.config import dump_settings, load_settings

    settings = load_settings(ws.config_path)
    target = settings.target.model_copy(update=values)
    ws.config_path.write_text(dump_settings(settings.model_copy(update={"target": target})), encoding="utf-8")
    return Workspace(ws.root)
