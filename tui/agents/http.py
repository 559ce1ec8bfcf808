"""`autoresearch mcp --http`: the MCP server over streamable HTTP on 127.0.0.1, answering only a
client that has its token, from no foreign page and on its own names.

A local HTTP server is reachable from every web page open in the user's browser, and the tools can
start and stop runs: the rules of the browser console apply (tui/webguard.py: Host, Origin,
token), checked by one ASGI middleware in front of the SDK's app before any request reaches it.
The token comes as `Authorization: Bearer TOKEN` (what MCP clients send; Claude Code's `headers`,
Codex's `bearer_token_env_var`) or `?token=TOKEN`. The SDK's own Host/Origin check is switched off:
these rules are stricter (a token, and an Origin must be this server's own) and live in one place.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qs

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tui.webguard import TOKEN_PARAM, Guard, bearer

log = logging.getLogger("autoresearch.mcp")

HOST = "127.0.0.1"
PATH = "/mcp"


class Guarded:
    """An ASGI app behind `guard`: a refused request gets 403 and one line saying why."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the SDK's session manager starts and stops
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = bearer(headers.get("authorization")) or (query.get(TOKEN_PARAM) or [None])[0]
        reason = self.guard.refusal(headers.get("host", ""), headers.get("origin"), token)
        if reason is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        log.warning("refused %s %s from %s: %s", scope.get("method"), scope.get("path"), client, reason)
        await PlainTextResponse(f"autoresearch mcp: {reason}\n", status_code=403)(scope, receive, send)


def guard_for(token: str) -> Guard:
    return Guard.make(
        HOST,
        token,
        what="this MCP server",
        token_hint="send the token printed at start (Authorization: Bearer TOKEN)",
    )


def serve(server: MCPServer, *, port: int, token: str) -> None:
    """Serve until interrupted (uvicorn handles SIGINT and SIGTERM)."""
    import uvicorn

    app = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=HOST,
    )
    config = uvicorn.Config(Guarded(app, guard_for(token)), host=HOST, port=port, log_level="warning")
    uvicorn.Server(config).run()
