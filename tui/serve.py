"""The console served to a browser (textual-serve), answering only the browser that has its token.

textual-serve's Server answers anyone: any web page open in the user's browser could open a
WebSocket to ws://127.0.0.1:8000/ws (browsers let pages connect to localhost; WebSockets are not
held to the same-origin policy) and type into the console (cross-site WebSocket hijacking); or
a page on a name the attacker controls could re-point that name at 127.0.0.1 and read the console
as its own origin (DNS rebinding). ConsoleServer adds three checks in one middleware, as Jupyter does
(the rules are tui/webguard.py's, shared with `autoresearch mcp --http`):

- Host: the name in the request must be one this server answers to: loopback names, the address it
  is bound to, the host of --public-url, or an IP address literal (rebinding needs a DNS name);
- Origin: a request that carries one (every browser WebSocket does) must come from the page's own
  origin (the Host it asked) or from --public-url;
- token: a random token, printed in the URL at start. Opening that URL sets an HttpOnly,
  SameSite=Strict cookie and redirects to the bare page; the page, its WebSocket and downloads
  need the cookie (or `?token=`), compared in constant time. Static files (textual-serve's own
  JavaScript and CSS) need only the Host check.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

from tui.webguard import TOKEN_PARAM, Guard, new_token

log = logging.getLogger("autoresearch.serve")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConsoleServer(Server):
    """textual-serve's Server with the Host, Origin and token checks of this module's docstring."""

    def __init__(
        self,
        command: str,
        *,
        host: str,
        port: int,
        public_url: str | None = None,
        token: str | None = None,
        title: str = "autoresearch",
    ) -> None:
        super().__init__(command, host=host, port=port, title=title, public_url=public_url)
        self.public_given = public_url is not None
        self.cookie_name = f"autoresearch-console-{port}"  # cookies ignore ports: one per console
        self.guard_rules = Guard.make(
            host,
            token or new_token(),
            public_url,
            what="this console",
            token_hint=f"open the URL printed when the console started (…/?{TOKEN_PARAM}=…)",
        )

    @property
    def token(self) -> str:
        return self.guard_rules.token

    @property
    def url(self) -> str:
        """The URL to open: the page with the token (print it; it is the key to the console)."""
        return f"{self.public_url.rstrip('/')}/?{TOKEN_PARAM}={self.token}"

    # --- the checks ---------------------------------------------------------------------------

    def refusal(self, request: web.Request) -> str | None:
        """Why this request is refused, or None (tui/webguard.py). Checked before any route runs.
        Static files (textual-serve's own scripts and styles) hold nothing secret: no token."""
        return self.guard_rules.refusal(
            request.headers.get("Host", ""),
            request.headers.get("Origin"),
            request.query.get(TOKEN_PARAM) or request.cookies.get(self.cookie_name),
            need_token=not request.path.startswith("/static/"),
        )

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        reason = self.refusal(request)
        if reason is not None:
            log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, reason)
            return web.Response(status=403, text=f"autoresearch console: {reason}\n")
        if request.path == "/" and TOKEN_PARAM in request.query:
            # The token URL: keep the token in a cookie, and out of the address bar and history.
            rest = {k: v for k, v in request.query.items() if k != TOKEN_PARAM}
            response = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(rest))})
            response.set_cookie(
                self.cookie_name,
                self.token,
                httponly=True,
                samesite="Strict",
                secure=request.secure or self.public_url.startswith("https:"),
                path="/",
            )
            return response
        return await handler(request)

    # --- textual-serve hooks ------------------------------------------------------------------

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self.guard)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints a banner and the URL without the token here; the CLI prints the
        URL with it instead."""

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """The page, with its WebSocket and static URLs on the origin the browser used (an SSH
        tunnel may forward another local port), or on --public-url when one was given."""
        base = self.public_url.rstrip("/") if self.public_given else f"{request.scheme}://{request.host}"
        router = request.app.router
        scheme, rest = base.split(":", 1)
        websocket = f"{'wss' if scheme == 'https' else 'ws'}:{rest}{router['websocket'].url_for()}"
        static = f"{base}{router['static'].url_for(filename='/')}".rstrip("/") + "/"
        return {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": websocket,
            "config": {"static": {"url": static}},
            "application": {"name": self.title},
        }
