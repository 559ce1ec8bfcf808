"""Driving `autoresearch mcp` as an agent would: the SDK's own client, over stdio, against a real
server process on a real workspace of the small C target (tests/runner/runner_target.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from kb.db import one
from kb.workspace import Workspace
from tests.runner.runner_target import must

ROOT = Path(__file__).resolve().parents[2]
FAST = {"min_pairs": 6, "batch_pairs": 2, "max_pairs": 6, "self_test_pairs": 6}
"""A policy that decides in 6 pairs (the C target's real effects are large)."""
WRITE_TOOLS = ("add_hypothesis", "queue_patch", "start_run", "stop_run", "steer_run")


def server_params(ws: Workspace, *extra: str) -> StdioServerParameters:
    """`autoresearch --workspace WS mcp EXTRA...` as an agent's configuration starts it."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "tui.cli", "--workspace", str(ws.root), "mcp", *extra],
        env=dict(os.environ),
        cwd=ROOT,
    )


@asynccontextmanager
async def connected(ws: Workspace, *extra: str) -> AsyncIterator[Client]:
    async with Client(server_params(ws, *extra), read_timeout_seconds=120) as client:
        yield client


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's structured result; the test fails with the tool's error text if it refused."""
    result = await client.call_tool(tool, args)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, f"{tool}: {text_of(result)}"
    data = result.structured_content
    assert isinstance(data, dict), result
    return data


async def refused(client: Client, tool: str, **args: Any) -> str:
    """The one-line error of a tool call that must be refused."""
    result = await client.call_tool(tool, args)
    assert isinstance(result, CallToolResult)
    assert result.is_error, f"{tool} was not refused: {text_of(result)}"
    text = text_of(result)
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def cli(ws: Workspace, *args: str) -> Result:
    from tui.cli import main

    return CliRunner(mix_stderr=False).invoke(main, ["--workspace", str(ws.root), *args])


def cli_json(ws: Workspace, *args: str) -> Any:
    result = cli(ws, *args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def counts(ws: Workspace) -> dict[str, int]:
    """Rows of the tables an agent's writes would change."""
    db = ws.db()
    try:
        return {
            t: int(must(one(db, f"SELECT count(*) AS n FROM {t}"))["n"])
            for t in ("hypotheses", "patches", "hypothesis_evidence", "runs", "commands")
        }
    finally:
        db.conn.close()


async def until(check: Callable[[], Awaitable[Any]], timeout: float, every: float = 0.5) -> Any:
    """Poll an async `check()` until it returns something truthy; its last value after `timeout`."""
    import anyio

    deadline = time.monotonic() + timeout
    value = await check()
    while not value and time.monotonic() < deadline:
        await anyio.sleep(every)
        value = await check()
    return value
