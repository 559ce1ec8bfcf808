"""`autoresearch tui --serve` against a hostile browser: real HTTP and WebSockets on 127.0.0.1 to a
real server process (aiohttp's client plays the browser), and the console it serves."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import async_test

ROOT = Path(__file__).resolve().parents[2]
EVIL = "http://evil.example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Console:
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    url: str
    """The URL the server printed, token and all."""

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"autoresearch-console-{self.port}={self.token}"}


def start_console(root: Path, log: Path, *extra: str) -> Console:
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tui.cli", "--workspace", str(root), "tui", "--serve", "--port", str(port),
             *extra],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    url = ""
    while time.monotonic() < deadline:
        found = re.search(r"serving the console on (\S+token=\S+)", log.read_text())
        if found and not url:
            url = found.group(1)
        if url:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return Console(process, log, port, url)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the console did not start: {log.read_text()}")


def stop(console: Console) -> None:
    console.process.terminate()
    try:
        console.process.wait(10)
    except subprocess.TimeoutExpired:
        console.process.kill()
        console.process.wait(10)


@pytest.fixture(scope="module")
def console(tui_template: TuiFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    served = start_console(tui_template.root, tmp_path_factory.mktemp("serve") / "serve.log")
    yield served
    stop(served)


def browser() -> aiohttp.ClientSession:
    # unsafe: keep cookies for an IP address host, as browsers do.
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def refused_websocket(
    session: aiohttp.ClientSession,
    url: str,
    *,
    origin: str | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    """The status a WebSocket handshake to `url` was refused with (fails if it was accepted)."""
    try:
        ws = await session.ws_connect(url, origin=origin, headers=headers)
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status
    await ws.close()
    raise AssertionError(f"{url}: WebSocket accepted")


async def first_output(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    """The first terminal bytes the served console sends (text messages are textual-serve's meta)."""
    async for message in ws:
        if message.type == aiohttp.WSMsgType.BINARY and message.data:
            return bytes(message.data)
        assert message.type == aiohttp.WSMsgType.TEXT, message
    raise AssertionError("the WebSocket closed before any output")


def test_the_url_printed_is_on_loopback_with_a_fresh_token(console: Console) -> None:
    assert console.url.startswith(f"http://127.0.0.1:{console.port}/?token=")
    assert len(console.token) >= 40  # 32 random bytes
    # Bound to loopback only: no other address of this machine answers.
    outside = socket.gethostbyname(socket.gethostname())
    if not outside.startswith("127."):
        with socket.socket() as s:
            s.settimeout(1)
            assert s.connect_ex((outside, console.port)) != 0


@async_test
async def test_the_printed_url_opens_the_console(console: Console) -> None:
    async with browser() as session:
        async with session.get(console.url) as response:
            assert response.status == 200 and response.url.query.get("token") is None  # out of the bar
            page = await response.text()
            set_cookie = response.history[0].headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        assert "autoresearch" in page
        ws_url = re.search(r'data-session-websocket-url="([^"]+)"', page)
        assert ws_url and ws_url.group(1) == f"ws://127.0.0.1:{console.port}/ws"
        # As the page's script does: the page's origin, the cookie the token URL set.
        async with session.ws_connect(f"{ws_url.group(1)}?width=80&height=24", origin=console.base) as ws:
            output = await asyncio.wait_for(first_output(ws), timeout=60)
            assert b"\x1b[" in output  # the console process started and drew on the terminal


@async_test
async def test_a_foreign_origin_is_refused(console: Console) -> None:
    """Cross-site WebSocket hijacking: a page elsewhere, in a browser that holds the cookie."""
    async with aiohttp.ClientSession(headers=console.cookie) as session:
        for origin in (
            EVIL,
            f"{EVIL}:{console.port}",
            "null",
            f"https://127.0.0.1.evil.example:{console.port}",
        ):
            assert await refused_websocket(session, f"{console.base}/ws", origin=origin) == 403
        async with session.get(f"{console.base}/", headers={"Origin": EVIL}) as response:
            assert response.status == 403 and "Origin" in await response.text()
        # The same cookie from the console's own origin works: the Origin is what was refused.
        async with session.ws_connect(f"{console.base}/ws", origin=console.base) as ws:
            assert not ws.closed


@async_test
async def test_a_wrong_host_is_refused(console: Console) -> None:
    """DNS rebinding: a name the attacker controls, pointed at 127.0.0.1, reaching this port."""
    rebound = {"Host": f"rebind.evil.example:{console.port}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(console.url, headers=rebound, allow_redirects=False) as response:
            assert response.status == 403  # even with the token
            assert "rebind.evil.example" in await response.text()
        async with session.get(f"{console.base}/static/js/textual.js", headers=rebound) as response:
            assert response.status == 403
        status = await refused_websocket(session, f"{console.base}/ws", headers={**rebound, **console.cookie})
        assert status == 403
        # Loopback names and addresses, on any port (an SSH tunnel may forward another one), pass.
        for host in (f"localhost:{console.port}", "localhost:9999", f"[::1]:{console.port}"):
            async with session.get(console.url, headers={"Host": host}, allow_redirects=False) as response:
                assert response.status == 303, host


@async_test
async def test_a_missing_or_wrong_token_is_refused(console: Console) -> None:
    wrong = console.token[:-4] + ("AAAA" if not console.token.endswith("AAAA") else "BBBB")
    async with aiohttp.ClientSession() as session:
        for url in (f"{console.base}/", f"{console.base}/?token=", f"{console.base}/?token={wrong}"):
            async with session.get(url) as response:
                assert response.status == 403, url
                assert "token" in await response.text()
        for url in (f"{console.base}/ws", f"{console.base}/ws?token={wrong}"):
            assert await refused_websocket(session, url, origin=console.base) == 403
        cookie = {"Cookie": f"autoresearch-console-{console.port}={wrong}"}
        assert (
            await refused_websocket(session, f"{console.base}/ws", origin=console.base, headers=cookie) == 403
        )
        async with session.get(f"{console.base}/download/anything") as response:
            assert response.status == 403
        # textual-serve's own script is public (nothing secret in it): the page needs it first.
        async with session.get(f"{console.base}/static/js/textual.js") as response:
            assert response.status == 200


@async_test
async def test_public_url_names_are_accepted_and_another_host_warns(
    tui_template: TuiFixture, tmp_path: Path
) -> None:
    port_hint = "9443"
    served = start_console(
        tui_template.root, tmp_path / "serve.log", "--host", "0.0.0.0", "--public-url",
        f"https://console.example:{port_hint}",
    )  # fmt: skip
    try:
        text = served.log.read_text()
        assert "warning: serving on 0.0.0.0, not localhost" in text and "token" in text
        assert served.url.startswith(f"https://console.example:{port_hint}/?token=")
        base = f"http://127.0.0.1:{served.port}"
        named = {"Host": f"console.example:{port_hint}"}
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"{base}/?token={served.token}", headers=named, allow_redirects=False
            ) as response:
                assert response.status == 303
                assert "Secure" in response.headers["Set-Cookie"]  # https public URL: the cookie too
            cookie = {"Cookie": f"autoresearch-console-{served.port}={served.token}"}
            async with session.get(f"{base}/", headers={**named, **cookie}) as response:
                assert response.status == 200
                page = await response.text()
            assert f'data-session-websocket-url="wss://console.example:{port_hint}/ws"' in page
            # The browser on the public URL sends that origin (a reverse proxy may rewrite Host).
            origin = f"https://console.example:{port_hint}"
            async with session.ws_connect(f"{base}/ws", origin=origin, headers=cookie) as ws:
                assert not ws.closed
            assert await refused_websocket(session, f"{base}/ws", origin=EVIL, headers=cookie) == 403
            async with session.get(f"{base}/", headers={"Host": "other.example", **cookie}) as response:
                assert response.status == 403
    finally:
        stop(served)
