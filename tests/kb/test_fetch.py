"""Fetching and reading papers against hostile inputs: one loopback server per case (real sockets,
threads), each fetch timed against its deadline; FIFOs, devices and folders on disk."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kb.config import KBSettings
from kb.db import rows
from kb.errors import UserError
from kb.fetch import MAX_REDIRECTS, get
from kb.files import read_regular_file
from kb.papers import add_paper
from kb.workspace import Workspace
from tests.kb.helpers import ENGLISH_SECTIONS, article_page, db_dump

TIMEOUT = 2.0
MARGIN = 1.5
"""A fetch must end within its timeout plus this (thread start-up and a loaded 2-core machine)."""

PAGE = article_page("Dripped article", ENGLISH_SECTIONS).encode()

CLI = [sys.executable, "-m", "tui.cli"]
Answer = Callable[[socket.socket, str], None]


class RawServer:
    """TCP on 127.0.0.1: each connection's request is read, then `answer(conn, path)` writes
    whatever bytes it likes, as slowly as it likes, in its own thread."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.stopped = threading.Event()
        self.paths: list[str] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._thread.join(5)
        self._listener.close()

    def url(self, path: str = "/paper") -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                request = b""
                while b"\r\n\r\n" not in request:
                    data = conn.recv(4096)
                    if not data:
                        return
                    request += data
                path = request.split(b" ", 2)[1].decode()
                self.paths.append(path)
                self._answer(conn, path)
            except OSError:
                pass  # the client gave up (its deadline): expected


def drip(server: RawServer, conn: socket.socket, data: bytes, every: float) -> None:
    """Send `data` a byte at a time, one every `every` seconds, until the client leaves."""
    for i in range(len(data)):
        if server.stopped.wait(every):
            return
        conn.sendall(data[i : i + 1])


def headers(length: int | None = None, content_type: str = "text/html; charset=utf-8") -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Type: {content_type}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Answer) -> RawServer:
        server = RawServer(answer).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


def timed_refusal(url: str, match: str, *, timeout: float = TIMEOUT, max_bytes: int = 5_000_000) -> float:
    """Fetch `url`, expect a one-line UserError matching `match`; return the seconds it took."""
    started = time.monotonic()
    with pytest.raises(UserError, match=match) as info:
        get(url, timeout=timeout, max_bytes=max_bytes, headers={})
    elapsed = time.monotonic() - started
    assert str(info.value).startswith(url) and "\n" not in str(info.value)
    return elapsed


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_deadline(serve: Callable[[Answer], RawServer]) -> None:
    # Each byte comes well inside any per-read timeout; only a deadline over the whole body stops it.
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(headers(len(PAGE)))
        drip(server, conn, PAGE, 0.2)

    server = serve(answer)
    elapsed = timed_refusal(server.url(), r"timed out after 2 s \(reading the body\)")
    assert elapsed < TIMEOUT + MARGIN


def test_headers_dripped_a_line_at_a_time_end_at_the_deadline(serve: Callable[[Answer], RawServer]) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for i in range(1000):
            if server.stopped.wait(0.3):
                return
            conn.sendall(f"X-Slow-{i}: yes\r\n".encode())

    server = serve(answer)
    elapsed = timed_refusal(server.url(), r"timed out after 2 s \(waiting for the response\)")
    assert elapsed < TIMEOUT + MARGIN


def test_a_silent_server_ends_at_the_deadline(serve: Callable[[Answer], RawServer]) -> None:
    server = serve(lambda conn, path: None if server.stopped.wait(30) else None)
    elapsed = timed_refusal(server.url(), r"timed out after 2 s \(waiting for the response\)")
    assert elapsed < TIMEOUT + MARGIN


def test_the_deadline_covers_every_redirect_hop(serve: Callable[[Answer], RawServer]) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        server.stopped.wait(0.4)  # each hop is quick enough alone; together they are too slow
        hop = int(path.rsplit("/", 1)[1])
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: /hop/{hop + 1}\r\nContent-Length: 0\r\n\r\n".encode())

    server = serve(answer)
    elapsed = timed_refusal(server.url("/hop/0"), r"timed out after 2 s")
    assert elapsed < TIMEOUT + MARGIN
    assert 3 <= len(server.paths) <= 7


def test_a_body_shorter_than_its_content_length_is_not_a_paper(
    workspace: Workspace, serve: Callable[[Answer], RawServer]
) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(headers(len(PAGE)) + PAGE[: len(PAGE) // 2])  # then the connection closes

    server = serve(answer)
    db = workspace.db()
    before = db_dump(workspace.db_path)
    settings = KBSettings(fetch_timeout=TIMEOUT)
    for _ in range(2):  # and adding it again is not "already in the knowledge base"
        with pytest.raises(UserError, match=rf"ended after {len(PAGE) // 2:,} of the {len(PAGE):,} bytes"):
            add_paper(db, server.url(), settings)
    assert db_dump(workspace.db_path) == before
    assert rows(db, "SELECT id FROM sources") == []


def test_a_chunked_body_cut_short_is_refused(serve: Callable[[Answer], RawServer]) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
        conn.sendall(head + b"%x\r\n" % len(PAGE) + PAGE[:1000])

    server = serve(answer)
    timed_refusal(server.url(), "cut short")


def redirect_to(location: str) -> Answer:
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(f"HTTP/1.1 301 Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode())

    return answer


@pytest.mark.parametrize("location", ["ftp://127.0.0.1/paper.html", "file:///etc/passwd", "gopher://x/"])
def test_redirects_go_only_to_http_and_https(serve: Callable[[Answer], RawServer], location: str) -> None:
    server = serve(redirect_to(location))
    scheme = location.split(":")[0]
    timed_refusal(server.url(), rf"redirected to {location}\): unsupported URL scheme '{scheme}'")


def test_each_hop_is_checked_for_size_again(serve: Callable[[Answer], RawServer]) -> None:
    big = serve(lambda conn, path: conn.sendall(headers(10_000_000)))
    server = serve(redirect_to(big.url("/huge")))
    timed_refusal(
        server.url(), r"redirected to .*/huge\): 10,000,000 bytes, over the size cap", max_bytes=1000
    )


def test_endless_redirects_stop(serve: Callable[[Answer], RawServer]) -> None:
    server = serve(redirect_to("/again"))
    timed_refusal(server.url(), f"more than {MAX_REDIRECTS} redirects")
    assert len(server.paths) == MAX_REDIRECTS + 1


def test_a_body_streamed_past_the_cap_is_abandoned(serve: Callable[[Answer], RawServer]) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(headers() + b"<html><body>")
        while not server.stopped.is_set():
            conn.sendall(b"<p>" + b"x" * 60_000 + b"</p>")

    server = serve(answer)
    elapsed = timed_refusal(server.url(), "over the size cap of 100,000 bytes", max_bytes=100_000)
    assert elapsed < TIMEOUT


def test_a_proxy_from_the_environment_is_used(
    serve: Callable[[Answer], RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(headers(len(PAGE)) + PAGE)

    proxy = serve(answer)
    monkeypatch.setenv("http_proxy", proxy.url("").rstrip("/"))
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    page = get("http://paper.example.invalid/a?b=1", timeout=TIMEOUT, max_bytes=10**6, headers={})
    assert page.data == PAGE and page.content_type == "text/html" and page.charset == "utf-8"
    assert proxy.paths == ["http://paper.example.invalid/a?b=1"]  # the absolute URL, as proxies want


# --- files ----------------------------------------------------------------------------------------


def refused_quickly(path: Path, match: str, max_bytes: int = 1_000_000) -> None:
    """read_regular_file refuses `path`, in a thread that must finish (a FIFO would hang it)."""
    outcome: list[BaseException | bytes] = []

    def work() -> None:
        try:
            outcome.append(read_regular_file(path, max_bytes=max_bytes))
        except BaseException as exc:  # noqa: BLE001 (handed to the test thread)
            outcome.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, f"{path}: still reading after 10 s"
    assert isinstance(outcome[0], UserError), outcome[0]
    message = str(outcome[0])
    assert message.startswith(str(path)) and "\n" not in message
    assert re.search(match, message), message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "paper.html"
    os.mkfifo(fifo)
    refused_quickly(fifo, "a FIFO, not a regular file")


def test_dev_zero_is_refused_not_read_forever(tmp_path: Path) -> None:
    refused_quickly(Path("/dev/zero"), "a character device, not a regular file")
    link = tmp_path / "zero.html"
    link.symlink_to("/dev/zero")
    refused_quickly(link, "a character device, not a regular file")


def test_a_directory_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "folder.html"
    folder.mkdir()
    before = db_dump(workspace.db_path)
    with pytest.raises(UserError, match="a directory, not a regular file"):
        add_paper(workspace.db(), str(folder), KBSettings())
    assert db_dump(workspace.db_path) == before


def test_the_size_cap_holds_while_reading(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"<html>" + b"x" * 5000)
    refused_quickly(path, "5,006 bytes, over the size cap of 5,000 bytes", max_bytes=5000)
    assert read_regular_file(path, max_bytes=5006) == path.read_bytes()


def test_the_cli_refuses_a_fifo_and_dev_zero_in_one_line(workspace: Workspace, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    before = db_dump(workspace.db_path)
    for target, reason in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tui.cli",
                "--workspace",
                str(workspace.root),
                "kb",
                "add-paper",
                str(target),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        assert result.stderr.strip() == f"Error: {target}: {reason}, not a regular file (only files are read)"
        assert "Traceback" not in result.stderr
    assert db_dump(workspace.db_path) == before


def test_a_malformed_canonical_link_is_ignored_not_fatal(
    workspace: Workspace, serve: Callable[[Answer], RawServer]
) -> None:
    page = article_page("Odd links", ENGLISH_SECTIONS, canonical="http://[::1").encode()
    server = serve(lambda conn, path: conn.sendall(headers(len(page)) + page))
    db = workspace.db()
    result = add_paper(db, server.url("/odd"), KBSettings(fetch_timeout=TIMEOUT))
    assert result.status == "added"
    [row] = rows(db, "SELECT canonical_url FROM sources WHERE id = ?", [result.source_id])
    assert row["canonical_url"] == server.url("/odd")
