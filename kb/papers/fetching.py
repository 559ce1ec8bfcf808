"""Where a paper comes from and how its bytes become text: arXiv ids and URLs, the fetch (or the
file read), the content-type check, and decoding by the encoding policy (kb.papers says it)."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from kb.errors import UserError

USER_AGENT = "autoresearch-kb/0.1 (+https://github.com/; literature ingestion)"


HTML_TYPES = ("text/html", "application/xhtml+xml")


HTML_SUFFIXES = (".html", ".htm", ".xhtml")


PDF_SUFFIX = ".pdf"


PDF_TYPES = ("application/pdf", "application/x-pdf", "application/acrobat")


PDF_MAGIC = b"%PDF-"


def is_pdf(content_type: str, head: bytes) -> bool:
    """A PDF by its first bytes or its declared type (its bytes are checked again when read)."""
    return head.lstrip()[:5] == PDF_MAGIC or content_type in PDF_TYPES


_ARXIV = re.compile(
    r"^(?:https?://)?(?:www\.|export\.)?arxiv\.org/(?P<kind>abs|html|pdf)/"
    r"(?P<id>\d{4}\.\d{4,5}|[a-z][a-z.-]*/\d{7})(?P<version>v\d+)?(?:\.pdf)?/?(?:[?#].*)?$",
    re.IGNORECASE,
)


_ARXIV_ID = re.compile(r"^arxiv:(?P<id>\d{4}\.\d{4,5}|[a-z][a-z.-]*/\d{7})(?P<version>v\d+)?$", re.IGNORECASE)


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


_HTML_SNIFF = re.compile(
    rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class Fetched:
    url: str
    """The final URL, after redirects."""
    content_type: str
    charset: str | None
    data: bytes


@dataclass(frozen=True)
class ArxivRef:
    id: str
    version: str

    @property
    def canonical_url(self) -> str:
        return f"https://arxiv.org/abs/{self.id}"

    def html_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/html/{self.id}{self.version}"

    def pdf_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/pdf/{self.id}{self.version}"


def parse_arxiv(location: str) -> ArxivRef | None:
    """arxiv.org/abs|html|pdf/ID[vN][.pdf] or arXiv:ID -> the paper's id (one paper whatever the link)."""
    match = _ARXIV.match(location.strip()) or _ARXIV_ID.match(location.strip())
    if not match:
        return None
    return ArxivRef(id=match.group("id"), version=match.group("version") or "")


def is_url(location: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location))


def normalise_url(url: str) -> str:
    """Comparable form of a URL: lower-case scheme and host, no fragment, no default port.
    A malformed one (`http://[::1`, port 99999) is a UserError naming it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UserError(f"{url}: not a valid URL ({exc})") from None
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets
    if port and not ((parts.scheme == "http" and port == 80) or (parts.scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    path = parts.path or "/"
    return urlunsplit((parts.scheme.lower(), host, path, parts.query, ""))


def _refuse_type(label: str, content_type: str, head: bytes) -> None:
    """Raise unless the content is HTML or a PDF (by type, or sniffed when the type is missing or
    generic)."""
    if is_pdf(content_type, head):
        return
    if content_type in HTML_TYPES:
        if b"\x00" in head[:8192] and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise UserError(f"{label}: binary content labelled {content_type}, not an HTML page")
        return
    if content_type in ("", "application/octet-stream") and _HTML_SNIFF.match(head[:4096]):
        return
    kind = content_type or "unknown type"
    if b"\x00" in head[:8192] or content_type.startswith(("image/", "audio/", "video/", "font/")):
        raise UserError(f"{label}: not HTML or PDF ({kind}, binary content)")
    raise UserError(f"{label}: not HTML or PDF ({kind})")


def fetch(url: str, *, timeout: float, max_bytes: int) -> Fetched:
    """GET an http(s) URL within one deadline and the size cap (kb.fetch: redirects checked hop by
    hop, a cut body refused), what is neither HTML nor a PDF refused from its first bytes before
    the rest is read."""
    from kb.fetch import get

    page = get(
        url,
        timeout=timeout,
        max_bytes=max_bytes,
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml;q=0.9,application/pdf;q=0.8,*/*;q=0.1",
        },
        check_head=lambda content_type, head: _refuse_type(url, content_type, head),
    )
    return Fetched(url=page.url, content_type=page.content_type, charset=page.charset, data=page.data)


def read_file(path: Path, *, max_bytes: int) -> Fetched:
    """A regular HTML or PDF file, up to the size cap (a folder, a FIFO or a device is refused
    unread)."""
    from kb.files import read_regular_file

    label = str(path)
    data = read_regular_file(path, max_bytes=max_bytes, label=label)
    if not data.strip():
        raise UserError(f"{label}: empty file")
    declared = "text/html" if path.suffix.lower() in HTML_SUFFIXES else ""
    if path.suffix.lower() == PDF_SUFFIX:
        declared = "application/pdf"
    _refuse_type(label, declared, data[:8192])
    if is_pdf(declared, data[:8192]):
        declared = "application/pdf"
    return Fetched(url=path.resolve().as_uri(), content_type=declared or "text/html", charset=None, data=data)


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip().strip("'\"")).name
    except LookupError:
        return None


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def decode_html(data: bytes, header_charset: str | None, label: str) -> tuple[str, list[str]]:
    """Bytes to text following the module's encoding policy; notes say when a label was wrong."""
    for bom, codec in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            try:
                return data.decode(codec), []
            except UnicodeDecodeError as exc:
                raise UserError(
                    f"{label}: invalid {codec} text after its byte-order mark (byte {exc.start})"
                ) from None
    meta = _META_CHARSET.search(data[:4096])
    declared_names = [n for n in (header_charset, meta.group(1).decode("ascii") if meta else None) if n]
    notes: list[str] = []
    declared: str | None = None
    for name in declared_names:
        declared = _codec(name)
        if declared:
            break
        notes.append(f"unknown charset {name!r} ignored")
    has_non_ascii = not data.isascii()
    if declared is None:
        try:
            return data.decode("utf-8"), notes
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{label}: not valid UTF-8 (byte {exc.start}) and no charset declared; "
                "refusing to guess the encoding"
            ) from None
    if declared != "utf-8" and not declared.startswith("utf-16") and has_non_ascii and _valid_utf8(data):
        notes.append(f"declared charset {declared} but the bytes are UTF-8: read as UTF-8")
        return data.decode("utf-8"), notes
    try:
        return data.decode(declared), notes
    except UnicodeDecodeError as exc:
        if declared != "utf-8" and _valid_utf8(data):
            notes.append(f"invalid {declared} (byte {exc.start}) but valid UTF-8: read as UTF-8")
            return data.decode("utf-8"), notes
        raise UserError(f"{label}: invalid {declared} text (byte {exc.start}) and not UTF-8 either") from None
