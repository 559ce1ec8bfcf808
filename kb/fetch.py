"""Bounded reads of what the knowledge base is asked to ingest: an http(s) URL, or a file.

A paper is all or nothing, so every read is bounded before it starts:

- time: one wall-clock deadline over the whole transfer, redirects included. Name resolution,
  connect, the TLS handshake, the status line, every header line and every body read each get only
  the time that is left, so a server that drips a byte (or a header line) every second cannot
  stretch it: a per-read timeout alone would restart at every byte;
- size: a Content-Length over the cap is refused before the body is read, and the body is
  abandoned as soon as it passes the cap; a body shorter than its Content-Length is an error (a cut
  transfer is not a paper);
- where: redirects go only to http and https, at most MAX_REDIRECTS, each hop checked again;
- files: kb.files.read_regular_file (only regular files, up to the cap).

Stdlib only: http.client on sockets this module opens and times. Proxies come from the usual
environment variables (http_proxy, https_proxy, no_proxy), as urllib reads them.
"""

from __future__ import annotations

import base64
import http.client
import io
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from kb.errors import UserError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 64 * 1024
SNIFF_BYTES = 8192
"""The first read of a body: enough to tell HTML from the rest before reading more."""

CheckHead = Callable[[str, bytes], None]
"""(content type, first bytes of the body) -> None; raises UserError to refuse the body unread."""


class Deadline:
    """A point in time that every blocking step is measured against."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; TimeoutError once there are none."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the {self.seconds:g} s deadline passed")
        return left


@dataclass(frozen=True)
class Page:
    url: str
    """The final URL, after redirects."""
    content_type: str
    """Lower case, without parameters ('' when the server sent none)."""
    charset: str | None
    data: bytes


# --- sockets that keep to the deadline ------------------------------------------------------------


def _resolve(host: str, port: int, deadline: Deadline) -> list[Any]:
    """getaddrinfo within the deadline: it cannot be given a timeout, so a slow resolver is left
    to finish in a daemon thread while the fetch fails on time."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address literal
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            box.append(exc)

    thread = threading.Thread(target=work, name=f"resolve {host}", daemon=True)
    thread.start()
    thread.join(deadline.left())
    if not box:
        raise TimeoutError(f"resolving {host}")
    if isinstance(box[0], OSError):
        raise box[0]
    found: list[Any] = box[0]
    return found


def _open_socket(host: str, port: int, deadline: Deadline) -> socket.socket:
    """A connected TCP socket (each address in turn, as socket.create_connection), its timeout
    set to the time left so the TLS handshake that may follow keeps to the deadline too."""
    error: OSError | None = None
    for family, kind, proto, _name, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(deadline.left())
            return sock
        except TimeoutError:
            sock.close()
            raise  # the connect had all the time left: there is none for another address
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"no address for {host}")


class _DeadlineReader(io.RawIOBase):
    """What http.client reads the response from: the socket's own file, each read given only
    the time left. It keeps that file open, which keeps the socket open after http.client's
    connection object lets go of it (it does, right after the headers of a response that ends
    the connection)."""

    def __init__(self, file: io.BufferedReader, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._file = file
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int | None:
        self._sock.settimeout(self._deadline.left())
        return self._file.raw.readinto(memoryview(buffer))

    def close(self) -> None:
        self._file.close()
        super().close()


def _response_class(deadline: Deadline) -> type[http.client.HTTPResponse]:
    class DeadlineResponse(http.client.HTTPResponse):
        def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
            super().__init__(sock, *args, **kwargs)
            self.fp = io.BufferedReader(_DeadlineReader(self.fp, sock, deadline))

    return DeadlineResponse


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, deadline: Deadline) -> None:
        super().__init__(host, port, timeout=deadline.left())
        self.response_class = _response_class(deadline)
        # http.client keeps this hook as an attribute so it can be replaced (its own comment says
        # so); connect() and the proxy tunnel both go through it.
        self._create_connection = lambda address, *_args: _open_socket(address[0], address[1], deadline)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, deadline: Deadline) -> None:
        super().__init__(host, port, timeout=deadline.left(), context=ssl.create_default_context())
        self.response_class = _response_class(deadline)
        self._create_connection = lambda address, *_args: _open_socket(address[0], address[1], deadline)


def _proxy(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The proxy for this scheme and host from the environment, as urllib finds it."""
    import urllib.request

    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    headers: dict[str, str] = {}
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")
    return parts.hostname or "", parts.port or 8080, headers


def _connection(
    scheme: str, host: str, port: int | None, url: str, deadline: Deadline
) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """(connection, request target, extra headers) for one hop, through a proxy if one is set."""
    parts = urlsplit(url)
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = _proxy(scheme, host)
    if proxy is None:
        cls = _HTTPSConnection if scheme == "https" else _HTTPConnection
        return cls(host, port, deadline), target, {}
    proxy_host, proxy_port, proxy_headers = proxy
    if scheme == "http":  # an http proxy is asked for the absolute URL
        absolute = urlunsplit(parts._replace(fragment=""))
        return _HTTPConnection(proxy_host, proxy_port, deadline), absolute, proxy_headers
    conn = _HTTPSConnection(proxy_host, proxy_port, deadline)  # https goes through a CONNECT tunnel
    conn.set_tunnel(host, port, headers=proxy_headers)
    return conn, target, {}


# --- GET ------------------------------------------------------------------------------------------


def get(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str],
    check_head: CheckHead | None = None,
) -> Page:
    """GET an http(s) URL, following redirects, within `timeout` seconds in all and `max_bytes`.

    Every failure is a UserError that starts with `url` and names the reason (and the hop, after a
    redirect)."""
    deadline = Deadline(timeout)
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        where = url if current == url else f"{url} (redirected to {current})"
        result = _one_hop(current, where, deadline, max_bytes, headers, check_head)
        if isinstance(result, Page):
            return result
        try:
            current = urljoin(current, result)
            urlsplit(current).port  # noqa: B018 (a port or a bracket urlsplit cannot read raises here)
        except ValueError as exc:
            raise UserError(f"{where}: redirected to an invalid URL {result!r} ({exc})") from None
    raise UserError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _one_hop(
    url: str,
    where: str,
    deadline: Deadline,
    max_bytes: int,
    headers: Mapping[str, str],
    check_head: CheckHead | None,
) -> Page | str:
    """One request: the page, or the Location a redirect points to."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # `http://[::1` or a `]` in the host
        raise UserError(f"{where}: not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UserError(f"{where}: unsupported URL scheme {scheme!r} (http and https only)")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise UserError(f"{where}: not a valid URL ({exc})") from None
    if not host:
        raise UserError(f"{where}: no host in the URL")
    phase = "connecting"
    conn: http.client.HTTPConnection | None = None
    try:
        conn, target, extra = _connection(scheme, host, port, url, deadline)
        conn.connect()
        phase = "waiting for the response"
        conn.request("GET", target, headers={**headers, **extra, "Connection": "close"})
        response = conn.getresponse()
        with response:
            if response.status in _REDIRECTS:
                location = response.getheader("Location")
                if not location:
                    raise UserError(f"{where}: HTTP {response.status} redirect without a Location")
                return location
            if not 200 <= response.status < 300:
                raise UserError(f"{where}: HTTP {response.status} {response.reason}")
            phase = "reading the body"
            return _body(url, where, response, max_bytes, check_head)
    except UserError:
        raise
    except TimeoutError:
        raise UserError(f"{where}: timed out after {deadline.seconds:g} s ({phase})") from None
    except http.client.IncompleteRead as exc:
        raise UserError(
            f"{where}: the connection closed after {len(exc.partial):,} bytes of a chunk: "
            "the transfer was cut short"
        ) from None
    except ssl.SSLCertVerificationError as exc:
        raise UserError(f"{where}: TLS certificate not accepted ({exc.verify_message})") from None
    except ssl.SSLError as exc:
        raise UserError(f"{where}: TLS failed ({exc.reason or exc})") from None
    except http.client.HTTPException as exc:
        if phase == "reading the body":
            raise UserError(f"{where}: connection failed while reading ({exc!r})") from None
        raise UserError(f"{where}: not a valid HTTP response ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        if phase == "connecting":
            raise UserError(f"{where}: cannot reach ({reason})") from None
        raise UserError(f"{where}: connection failed while {phase} ({reason})") from None
    finally:
        if conn is not None:
            conn.close()


def _body(
    url: str,
    where: str,
    response: http.client.HTTPResponse,
    max_bytes: int,
    check_head: CheckHead | None,
) -> Page:
    raw_type = response.getheader("Content-Type") or ""
    content_type = raw_type.split(";")[0].strip().lower()
    charset = response.msg.get_content_charset() if raw_type else None
    declared = response.length  # http.client's reading of Content-Length (None: none, or chunked)
    if declared is not None and declared > max_bytes:
        raise UserError(f"{where}: {declared:,} bytes, over the size cap of {max_bytes:,} bytes")
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read(_CHUNK if chunks else SNIFF_BYTES)
        if not chunk:
            break
        if not chunks and check_head is not None:
            check_head(content_type, chunk)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise UserError(f"{where}: over the size cap of {max_bytes:,} bytes (stopped reading)")
    if response.length:  # http.client counts down what Content-Length promised
        raise UserError(
            f"{where}: the body ended after {total:,} of the {declared:,} bytes its Content-Length "
            "announced: the transfer was cut short"
        )
    if not chunks:
        raise UserError(f"{where}: empty response")
    return Page(url=url, content_type=content_type, charset=charset, data=b"".join(chunks))
