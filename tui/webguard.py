"""Who may talk to a server this program runs on 127.0.0.1: the Host, Origin and token rules.

Binding to 127.0.0.1 keeps other machines out, not other web pages: any page open in the user's
browser may send requests (and WebSockets) to http://127.0.0.1:PORT, and a page on a name its
author controls can re-point that name at 127.0.0.1 and then read the answers as its own origin
(DNS rebinding). So every request is checked three ways, as Jupyter does:

- Host: the name in the request must be one the server answers to: loopback names, the address it
  is bound to, the host of a public URL it was given, or an IP address literal (rebinding needs a
  DNS name);
- Origin: a request that carries one (every browser request across origins does) must come from
  the server's own origin (the Host it asked) or from the public URL;
- token: a random token printed at start, compared in constant time.

Two servers apply these rules: the browser console (`autoresearch tui --serve`, tui/serve.py,
aiohttp) and the MCP server's HTTP transport (`autoresearch mcp --http`, tui/agents/http.py,
starlette). Each reads the headers its own way and asks `Guard.refusal`; the rules live here only.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
TOKEN_PARAM = "token"


def hostname(netloc: str) -> str:
    """'Example.org:8000' -> 'example.org'; '[::1]:8000' -> '::1'."""
    try:
        return (urlsplit(f"//{netloc}").hostname or "").lower()
    except ValueError:  # a malformed port or bracket
        return ""


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def new_token() -> str:
    return secrets.token_urlsafe(32)


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class Guard:
    """The names a server answers to, its public origin (if any) and its token."""

    host_names: frozenset[str]
    public_origin: str
    """scheme://host[:port] of the public URL, lower case; "" when none was given."""
    token: str
    what: str = "this server"
    """How refusals name the server ("this console")."""
    token_hint: str = "give the token printed at start"
    """What to do for a valid token, the refusal's words after `no valid token: `."""

    @classmethod
    def make(
        cls,
        host: str,
        token: str,
        public_url: str | None = None,
        *,
        what: str = "this server",
        token_hint: str = "give the token printed at start",
    ) -> Guard:
        """The guard of a server bound to `host` (with `public_url`, the address browsers use)."""
        names = set(LOOPBACK_NAMES)
        if host not in ("0.0.0.0", "::", ""):
            names.add(host.lower())
        public = urlsplit(public_url) if public_url else None
        if public is not None and public.hostname:
            names.add(public.hostname.lower())
        origin = f"{public.scheme}://{public.netloc}".lower() if public is not None else ""
        return cls(frozenset(names), origin, token, what, token_hint)

    def refusal(
        self, host: str, origin: str | None, token: str | None, *, need_token: bool = True
    ) -> str | None:
        """Why a request with these headers (and this token, however the server reads it) is
        refused, or None. `need_token=False` for what holds no secret (static scripts)."""
        name = hostname(host)
        if not name or not (name in self.host_names or is_ip(name)):
            return (
                f"Host {host!r} is not a name {self.what} answers to "
                f"({', '.join(sorted(self.host_names))}); start it with --public-url naming it"
            )
        if origin is not None and not self.same_origin(origin, host):
            return f"Origin {origin!r} is not {self.what}'s page"
        if need_token and not self.token_ok(token):
            return f"no valid token: {self.token_hint}"
        return None

    def same_origin(self, origin: str, host: str) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False  # "null" (sandboxed frames, file: pages) and the like
        return parts.netloc.lower() == host.lower() or origin.lower().rstrip("/") == self.public_origin

    def token_ok(self, given: str | None) -> bool:
        return hmac.compare_digest((given or "").encode(), self.token.encode())
