"""PDF papers: their text in reading order, split into passages that carry their page numbers.

The text is laid out by pdfminer.six (MIT), in a child process (kb/papers/pdf_child.py) that runs
under a memory limit (`kb.pdf_memory_mb`, RLIMIT_AS) and a deadline (`kb.pdf_seconds`): a
decompression bomb or a parser that loops ends that process, and the paper is refused with one
line. Why pdfminer.six: its layout analysis orders text boxes by position, so two-column papers
read column by column whatever order their content stream draws the text in (pypdf and
pdfplumber's default extraction follow the stream or read across both columns line by line);
PyMuPDF is faster and orders well too, but is AGPL, which this MIT project cannot ship.
pdfminer.six is pure Python: ~0.05 s for a two-page paper, a few seconds for a long one, plus the
child's start (benchmarks/bench_pdf.py prints the figures).

From pdfminer's boxes to blocks (the HTML path's (kind, level, text) plus pages):
- a line in a font clearly larger than the body's is a heading (its size ranks its level); the
  largest lines of page 1 are the title when the PDF's /Title is missing or a file name;
- lines of a box are one paragraph (words hyphenated at a line's end are joined); a paragraph that
  ends without a full stop and a next one that starts in lower case are one (a sentence broken by
  a column or a page: its passage carries both pages);
- boxes side by side with the same number of short lines on the same baselines are a table, read
  row by row (`a | b | c`);
- bare page numbers and a line repeated on most pages (a running header or footer) are dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb.errors import UserError
from kb.papers.fetching import PDF_MAGIC
from kb.papers.parsing import Extracted, split_passages

_PAGE_NUMBER = re.compile(r"^\s*(?:page\s+)?\d{1,4}(?:\s*(?:/|of)\s*\d{1,4})?\s*$", re.IGNORECASE)
_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>]+)")
_SENTENCE_END = (".", "!", "?", ":", ";", "\u201d", '"', ")")
_JUNK_TITLE = re.compile(r"^(microsoft (word|powerpoint)|untitled)|\.(pdf|docx?|tex|dvi|ps)$", re.IGNORECASE)
TABLE_CELL_CHARS = 24
"""A box whose lines are this short (median) may be a table column."""


def _check_complete(data: bytes, label: str) -> None:
    if not data.lstrip()[:5] == PDF_MAGIC:
        raise UserError(f"{label}: labelled a PDF but does not start with %PDF-")
    if b"%%EOF" not in data[-2048:]:
        raise UserError(
            f"{label}: truncated PDF (no %%EOF at its end: the file or the download was cut short)"
        )


def _limits(memory_mb: int, seconds: float) -> Any:
    def apply() -> None:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        cpu = int(seconds) + 1  # the wall-clock deadline is the parent's; this ends a loop regardless
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

    return apply


def read_layout(data: bytes, label: str, *, seconds: float, memory_mb: int) -> dict[str, Any]:
    """pdfminer's boxes and the document info, from the child process (within the limits)."""
    _check_complete(data, label)
    try:
        done = subprocess.run(
            # The file itself, isolated (-I): the child imports pdfminer and nothing of this package.
            [sys.executable, "-I", str(Path(__file__).with_name("pdf_child.py"))],
            input=data,
            capture_output=True,
            timeout=seconds,
            preexec_fn=_limits(memory_mb, seconds),
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{label}: reading the PDF took longer than {seconds:g} s (kb.pdf_seconds); refused"
        ) from None
    reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
    last = reason[-1] if reason else ""
    if done.returncode in (-24, -9) and "MemoryError" not in last:  # SIGXCPU, or killed at its CPU cap
        raise UserError(
            f"{label}: reading the PDF took more than {seconds:g} s of CPU (kb.pdf_seconds); refused"
        )
    if done.returncode == 3 or "MemoryError" in last:
        raise UserError(
            f"{label}: reading the PDF needs more than {memory_mb} MB (kb.pdf_memory_mb): "
            "a decompression bomb or a huge stream; refused"
        )
    if done.returncode != 0:
        raise UserError(f"{label}: not a readable PDF ({last or f'exit {done.returncode}'})")
    try:
        layout = json.loads(done.stdout)
    except ValueError:
        raise UserError(f"{label}: the PDF reader's output was cut short") from None
    if not isinstance(layout, dict) or not isinstance(layout.get("pages"), list):
        raise UserError(f"{label}: the PDF reader's output is not understood")
    return layout


# --- from boxes to blocks ---------------------------------------------------------------------------


@dataclass
class _Line:
    text: str
    size: float
    y0: float


@dataclass
class _Box:
    page: int
    x0: float
    x1: float
    y1: float
    lines: list[_Line]

    @property
    def text(self) -> str:
        return " ".join(line.text.strip() for line in self.lines)


@dataclass
class _Block:
    kind: str
    level: int
    text: str
    first: int
    last: int
    sizes: list[float] = field(default_factory=list)


def _boxes(layout: dict[str, Any]) -> list[list[_Box]]:
    pages: list[list[_Box]] = []
    for number, raw in enumerate(layout["pages"], start=1):
        boxes = []
        for box in raw if isinstance(raw, list) else []:
            lines = [
                _Line(str(line["text"]), float(line.get("size") or 0), float(line.get("y0") or 0))
                for line in box.get("lines", [])
                if str(line.get("text", "")).strip()
            ]
            if lines:
                boxes.append(_Box(number, float(box["x0"]), float(box["x1"]), float(box["y1"]), lines))
        pages.append(boxes)
    return pages


def _repeated(pages: list[list[_Box]]) -> set[str]:
    """One-line boxes found on most pages (running headers and footers)."""
    if len(pages) < 3:
        return set()
    seen: dict[str, int] = {}
    for boxes in pages:
        for text in {b.text for b in boxes if len(b.lines) == 1}:
            seen[text] = seen.get(text, 0) + 1
    return {text for text, n in seen.items() if n > len(pages) // 2}


def _tables(boxes: list[_Box]) -> list[_Box | list[_Box]]:
    """Runs of boxes that are the columns of one table, grouped; other boxes as they are."""
    out: list[_Box | list[_Box]] = []
    i = 0
    while i < len(boxes):
        group = [boxes[i]]
        j = i + 1
        while j < len(boxes) and _same_rows(group[0], boxes[j]):
            group.append(boxes[j])
            j += 1
        if len(group) > 1 and _short(group):
            out.append(group)
            i = j
        else:
            out.append(boxes[i])
            i += 1
    return out


def _same_rows(a: _Box, b: _Box) -> bool:
    return (
        len(a.lines) == len(b.lines) >= 2
        and b.x0 > a.x0
        and all(abs(x.y0 - y.y0) < 3 for x, y in zip(a.lines, b.lines, strict=True))
    )


def _short(group: list[_Box]) -> bool:
    lengths = sorted(len(line.text.strip()) for box in group for line in box.lines)
    return lengths[len(lengths) // 2] <= TABLE_CELL_CHARS


def _join_lines(lines: list[str]) -> str:
    text = ""
    for line in (line.strip() for line in lines):
        if not text:
            text = line
        elif text.endswith("-") and line[:1].islower() and text[-2:-1].isalpha():
            text = text[:-1] + line  # "proces-" + "sing"
        else:
            text = f"{text} {line}"
    return text


def _body_size(pages: list[list[_Box]]) -> float:
    weight: dict[float, int] = {}
    for boxes in pages:
        for box in boxes:
            for line in box.lines:
                weight[line.size] = weight.get(line.size, 0) + len(line.text)
    return max(weight, key=lambda s: weight[s]) if weight else 0.0


def _blocks(pages: list[list[_Box]], body: float) -> list[_Block]:
    repeated = _repeated(pages)
    blocks: list[_Block] = []
    for boxes in pages:
        kept = [
            b for b in boxes if not (len(b.lines) == 1 and (_PAGE_NUMBER.match(b.text) or b.text in repeated))
        ]
        for item in _tables(kept):
            if isinstance(item, list):
                rows = [
                    " | ".join(box.lines[r].text.strip() for box in item) for r in range(len(item[0].lines))
                ]
                blocks.append(_Block("table", 0, "\n".join(rows), item[0].page, item[0].page))
                continue
            blocks.extend(_box_blocks(item, body))
    return _mend(blocks)


def _box_blocks(box: _Box, body: float) -> list[_Block]:
    """A box's headings (lines in a font clearly larger than the body's) and paragraphs."""
    out: list[_Block] = []
    paragraph: list[str] = []
    for line in box.lines:
        if line.size >= body + 1.0 and len(line.text.strip()) <= 120:
            if paragraph:
                out.append(_Block("text", 0, _join_lines(paragraph), box.page, box.page))
                paragraph = []
            out.append(_Block("head", 0, line.text.strip(), box.page, box.page, [line.size]))
        else:
            paragraph.append(line.text)
    if paragraph:
        out.append(_Block("text", 0, _join_lines(paragraph), box.page, box.page))
    return out


def _mend(blocks: list[_Block]) -> list[_Block]:
    """A paragraph cut by a column or a page (no full stop, the next starts in lower case) is one."""
    out: list[_Block] = []
    for block in blocks:
        last = out[-1] if out else None
        if (
            last is not None
            and last.kind == block.kind == "text"
            and not last.text.rstrip().endswith(_SENTENCE_END)
            and block.text[:1].islower()
        ):
            last.text = _join_lines([last.text, block.text])
            last.last = block.last
            continue
        out.append(block)
    return out


def _title(blocks: list[_Block], info: dict[str, str], label: str) -> str:
    given = " ".join(info.get("title", "").split())
    if len(given) >= 8 and not _JUNK_TITLE.search(given):
        return given
    heads = [b for b in blocks if b.kind == "head" and b.first == 1]
    if heads:
        biggest = max(b.sizes[0] for b in heads)
        return " ".join(b.text for b in heads if b.sizes[0] == biggest)
    return label.rsplit("/", 1)[-1]


def _levels(blocks: list[_Block], title: str) -> None:
    sizes = sorted({b.sizes[0] for b in blocks if b.kind == "head" and b.text != title}, reverse=True)
    for block in blocks:
        if block.kind == "head":
            block.level = 1 if block.text == title else 2 + min(sizes.index(block.sizes[0]), 3)


def _date(raw: str | None) -> str | None:
    match = re.match(r"^(?:D:)?(\d{4})(\d{2})?(\d{2})?", raw or "")
    if not match:
        return None
    return "-".join(part for part in match.groups() if part)


def extract_pdf(data: bytes, label: str, *, passage_chars: int, seconds: float, memory_mb: int) -> Extracted:
    """A PDF paper's text as passages with their pages; bad or hostile PDFs are one UserError."""
    layout = read_layout(data, label, seconds=seconds, memory_mb=memory_mb)
    pages = _boxes(layout)
    info = {str(k): str(v) for k, v in (layout.get("info") or {}).items()}
    blocks = _blocks(pages, _body_size(pages))
    if not any(b.kind != "head" for b in blocks):
        raise UserError(f"{label}: no extractable text in the PDF (scanned pages? no OCR is done)")
    title = _title(blocks, info, label)
    _levels(blocks, title)
    passages = split_passages(
        [("text" if b.kind == "table" else b.kind, b.level, b.text) for b in blocks],
        title,
        passage_chars,
        pages=[(b.first, b.last) for b in blocks],
    )
    first_page = " ".join(b.text for b in blocks if b.first == 1)
    doi = info.get("doi") or next(iter(_DOI.findall(first_page)), None)
    full_text = "\n\n".join(p.text for p in passages)
    return Extracted(
        title=title,
        authors=info.get("author") or None,
        published=_date(info.get("creationdate")),
        site=None,
        canonical_url=None,
        language=None,
        passages=passages,
        content_hash=hashlib.sha256(" ".join(full_text.split()).encode()).hexdigest(),
        doi=doi.rstrip(".,;)") if doi else None,
        pages=len(pages),
    )
