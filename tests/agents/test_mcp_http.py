"""`autoresearch mcp --http` against a hostile browser and a client without the token: a real
server process on 127.0.0.1, real HTTP (httpx plays the page; the SDK's own client plays the agent)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kb.workspace import Workspace
from tests.agents.support import ROOT, WRITE_TOOLS
from tests.runner.runner_target import make_workspace

EVIL = "http://evil.example"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    token: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def post(self, headers: dict[str, str], url: str | None = None) -> httpx.Response:
        return httpx.post(url or self.url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=30)


def start(ws: Workspace, log: Path, *extra: str) -> Served:
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), "mcp", "--http",
             "--port", str(port), *extra],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"token: (\S+)", log.read_text())
        with socket.socket() as s:
            if found and s.connect_ex(("127.0.0.1", port)) == 0:
                return Served(process, log, port, found.group(1))
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the MCP server did not start: {log.read_text()}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    ws, _ = make_workspace(tmp_path)
    server = start(ws, tmp_path / "mcp-http.log")
    yield server
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def test_it_listens_on_loopback_with_a_fresh_token(served: Served) -> None:
    text = served.log.read_text()
    assert f"serving MCP (reads and writes) on http://127.0.0.1:{served.port}/mcp" in text
    assert len(served.token) >= 32


def test_a_missing_or_wrong_token_is_refused(served: Served) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {served.token}"}):
        response = served.post(headers)
        assert response.status_code == 403, headers
        assert response.text == (
            "autoresearch mcp: no valid token: send the token printed at start "
            "(Authorization: Bearer TOKEN)\n"
        )
    assert "refused POST /mcp" in served.log.read_text()


def test_a_foreign_origin_or_host_is_refused_even_with_the_token(served: Served) -> None:
    bearer = {"Authorization": f"Bearer {served.token}"}
    response = served.post({**bearer, "Origin": EVIL})
    assert response.status_code == 403
    assert response.text == f"autoresearch mcp: Origin '{EVIL}' is not this MCP server's page\n"
    response = served.post({**bearer, "Origin": "null"})
    assert response.status_code == 403 and "Origin 'null'" in response.text
    response = served.post({**bearer, "Host": f"evil.example:{served.port}"})
    assert response.status_code == 403
    assert response.text.startswith(f"autoresearch mcp: Host 'evil.example:{served.port}' is not a name this")


def test_the_token_opens_it_to_the_sdk_client(served: Served) -> None:
    own_page = served.post(
        {"Authorization": f"Bearer {served.token}", "Origin": f"http://127.0.0.1:{served.port}"}
    )
    assert own_page.status_code == 200, own_page.text
    by_query = served.post({}, url=f"{served.url}?token={served.token}")
    assert by_query.status_code == 200, by_query.text

    async def agent() -> None:
        headers = {"Authorization": f"Bearer {served.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(served.url, http_client=http)) as client,
        ):
            names = {t.name for t in (await client.list_tools()).tools}
            assert set(WRITE_TOOLS) <= names
            result = await client.call_tool("list_hypotheses", {})
            assert not result.is_error and result.structured_content == {
                "total": 0,
                "offset": 0,
                "remaining": 0,
                "hypotheses": [],
            }

    anyio.run(agent)
