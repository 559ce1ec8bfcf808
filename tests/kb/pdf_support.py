"""PDFs written by the tests themselves, in PDF syntax (no PDF library): a two-column paper with a
table and a sentence broken across a page, a decompression bomb, a truncated file.

The text is drawn in an order that is *not* the reading order (left and right column lines
interleaved, the table before the columns), so only an extractor that reads the page's layout,
not its content stream, gets the reading order back.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

PAGE_W, PAGE_H = 612, 792
LEFT_X, RIGHT_X = 72, 322
LINE = 13


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


@dataclass
class Page:
    """Text runs of one page: (x, y, size, text), drawn in the order given."""

    runs: list[tuple[float, float, float, str]] = field(default_factory=list)

    def text(self, x: float, y: float, text: str, size: float = 10) -> None:
        self.runs.append((x, y, size, text))

    def stream(self) -> bytes:
        parts = []
        for x, y, size, text in self.runs:
            parts.append(f"BT /F1 {size:g} Tf 1 0 0 1 {x:g} {y:g} Tm ({_escape(text)}) Tj ET")
        return "\n".join(parts).encode("latin-1")


def build_pdf(pages: list[bytes], *, title: str | None = None, compress: bool = True) -> bytes:
    """A PDF 1.4 file: one Helvetica font, one content stream per page, a correct xref table."""
    objects: list[bytes] = []
    n_pages = len(pages)
    page_ids = [4 + 2 * i for i in range(n_pages)]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = " ".join(f"{pid} 0 R" for pid in page_ids)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    for i, content in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_ids[i] + 1} 0 R >>".encode()
        )
        objects.append(stream_object(content, compress=compress))
    info_id = None
    if title is not None:
        objects.append(f"<< /Title ({_escape(title)}) /Producer (autoresearch tests) >>".encode())
        info_id = len(objects)
    return assemble(objects, info_id=info_id)


def stream_object(content: bytes, *, compress: bool = True, filters: int = 1) -> bytes:
    data = content
    names = []
    for _ in range(filters if compress else 0):
        data = zlib.compress(data, 9)
        names.append("/FlateDecode")
    head = f"<< /Length {len(data)}"
    if names:
        head += f" /Filter [{' '.join(names)}]" if len(names) > 1 else f" /Filter {names[0]}"
    return head.encode() + b" >>\nstream\n" + data + b"\nendstream"


def assemble(objects: list[bytes], *, info_id: int | None = None) -> bytes:
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    info = f" /Info {info_id} 0 R" if info_id else ""
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


# --- the paper -------------------------------------------------------------------------------------

TITLE = "Fusing Gate and Up Projections for Faster Expert Layers"

LEFT_1 = [
    "Abstract. Mixture of experts layers read the gate and",
    "the up projection weights in two separate passes over",
    "memory. We fuse both matrix products into one kernel.",
    "",
    "1 Introduction",
    "Prompt processing on the CPU is bound by memory traffic",
    "when the weights do not fit in the last level cache.",
    "Each pass streams every expert weight from DRAM.",
]
RIGHT_1 = [
    "2 Method",
    "The fused kernel computes gate and up for a block of",
    "rows before it moves on, so the activations stay in",
    "registers while both weight tiles are read. The",
    "activation function is applied before the store, and",
    "the second intermediate buffer disappears. Because",
    "the fused kernel reads",
]
LEFT_2 = [
    "the weights once, the traffic of the layer is halved",
    "for the up projection and the cache holds the tile.",
    "",
    "3 Results",
    "Prompt processing gains 12 percent on a dense model",
    "and 9 percent on a sparse one, with no change in the",
    "text generation speed.",
]
TABLE = [
    ("model", "baseline t/s", "fused t/s"),
    ("dense 7B", "41.0", "45.9"),
    ("moe 30B", "88.2", "96.1"),
]


def two_column_paper() -> bytes:
    """Page 1: a title across both columns, two columns drawn line by line alternating between
    them (right first); page 2: the end of the broken sentence, a results section and a table
    drawn before the text above it."""
    first = Page()
    first.text(LEFT_X, 740, TITLE, size=16)
    top = 700
    for i in range(max(len(LEFT_1), len(RIGHT_1))):
        y = top - i * LINE
        if i < len(RIGHT_1) and RIGHT_1[i]:
            first.text(RIGHT_X, y, RIGHT_1[i], size=12 if RIGHT_1[i] == "2 Method" else 9)
        if i < len(LEFT_1) and LEFT_1[i]:
            first.text(LEFT_X, y, LEFT_1[i], size=12 if LEFT_1[i] == "1 Introduction" else 9)
    first.text(PAGE_W / 2 - 4, 40, "1", size=8)  # the page number in the footer
    second = Page()
    table_top = 560
    for r, row in enumerate(TABLE):
        for c, cell in enumerate(row):
            second.text(LEFT_X + c * 70, table_top - r * LINE, cell, size=9)
    for i, line in enumerate(LEFT_2):
        if line:
            second.text(LEFT_X, 740 - i * LINE, line, size=12 if line == "3 Results" else 9)
    second.text(PAGE_W / 2 - 4, 40, "2", size=8)
    return build_pdf([first.stream(), second.stream()], title=TITLE)


def inflating_to(megabytes: int) -> bytes:
    """A zlib stream of `megabytes` MB of zeros, made without compressing them: after a full flush
    a deflate compressor's output for the same 1 MB chunk is the same bytes, so one chunk's output
    is repeated (and the Adler-32 of n zeros is (n mod 65521) << 16 | 1)."""
    chunk = 1 << 20
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflate.compress(b"\0" * chunk)
    deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(b"\0" * chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    total = megabytes * chunk
    adler = ((total % 65521) << 16) | 1
    return b"\x78\xda" + block * megabytes + deflate.flush() + adler.to_bytes(4, "big")


def bomb(megabytes: int = 2048) -> bytes:
    """A small file whose one content stream inflates to `megabytes` MB (two FlateDecode layers)."""
    outer = zlib.compress(inflating_to(megabytes), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] "
        f"/Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>".encode(),
        f"<< /Length {len(outer)} /Filter [/FlateDecode /FlateDecode] >>\nstream\n".encode()
        + outer
        + b"\nendstream",
    ]
    return assemble(objects)
