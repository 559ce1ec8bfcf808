"""The console served to a browser (textual-serve), answering only the browser that has its token.

textual-serve's Server answers anyone: any web page open in the user's browser could open a
WebSocket to ws://127.0.0.1:8000/ws (browsers let pages connect to localhost; WebSockets are not
held to the same-origin policy) and type into the console (cross-site WebSocket hijacking); or
a page on a name the attacker controls could re-point that name at 127.0.0.1 and read the console
as its own origin (DNS rebinding). ConsoleServer adds three checks in one middleware, as Jupyter does:

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

import hmac
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

log = logging.getLogger("autoresearch.serve")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
TOKEN_PARAM = "token"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _hostname(netloc: str) -> str:
    """'Example.org:8000' -> 'example.org'; '[::1]:8000' -> '::1'."""
    return (urlsplit(f"//{netloc}").hostname or "").lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


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
        self.token = token or secrets.token_urlsafe(32)
        self.cookie_name = f"autoresearch-console-{port}"  # cookies ignore ports: one per console
        public = urlsplit(self.public_url)
        self.public_origin = f"{public.scheme}://{public.netloc}".lower() if public_url else ""
        names = set(LOOPBACK_NAMES)
        if host not in ("0.0.0.0", "::", ""):
            names.add(host.lower())
        if public.hostname:
            names.add(public.hostname.lower())
        self.host_names = frozenset(names)

    @property
    def url(self) -> str:
        """The URL to open: the page with the token (print it; it is the key to the console)."""
        return f"{self.public_url.rstrip('/')}/?{TOKEN_PARAM}={self.token}"

    # --- the checks ---------------------------------------------------------------------------

    def refusal(self, request: web.Request) -> str | None:
        """Why this request is refused, or None. Checked before any route runs."""
        host = request.headers.get("Host", "")
        name = _hostname(host)
        if not name or not (name in self.host_names or _is_ip(name)):
            return (
                f"Host {host!r} is not a name this console answers to "
                f"({', '.join(sorted(self.host_names))}); start it with --public-url naming it"
            )
        origin = request.headers.get("Origin")
        if origin is not None and not self._same_origin(origin, host):
            return f"Origin {origin!r} is not this console's page"
        if request.path.startswith("/static/"):
            return None  # textual-serve's own scripts and styles: nothing secret
        if not self._has_token(request):
            return f"no valid token: open the URL printed when the console started (…/?{TOKEN_PARAM}=…)"
        return None

    def _same_origin(self, origin: str, host: str) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False  # "null" (sandboxed frames, file: pages) and the like
        return parts.netloc.lower() == host.lower() or origin.lower().rstrip("/") == self.public_origin

    def _has_token(self, request: web.Request) -> bool:
        given = request.query.get(TOKEN_PARAM) or request.cookies.get(self.cookie_name) or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

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
