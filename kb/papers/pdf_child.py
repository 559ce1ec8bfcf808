"""The PDF reader's child process: `python -I kb/papers/pdf_child.py` reads a PDF on stdin and writes
its text lines as JSON on stdout, laid out by pdfminer.six (kb/papers/pdf.py starts it, with a
memory limit and a deadline, and builds the passages).

pdfminer.six groups characters into lines and lines into text boxes by their position on the page
and orders the boxes (LAParams' boxes_flow), so two columns come out column by column whatever
order the content stream draws them in. It is imported here only: this process exists to read
one PDF and end, and a PDF bomb or a parser loop ends it, not the caller.

Output: {"pages": [[box, ...], ...], "info": {"title": ...}}, a box being
{"x0", "x1", "y0", "y1", "lines": [{"text", "size", "y0", "y1"}, ...]}. Failures: one line on
stderr and exit status 2 (not a readable PDF) or 3 (out of memory).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _decoded(value: Any) -> str:
    from pdfminer.pdftypes import resolve1
    from pdfminer.utils import decode_text

    value = resolve1(value)
    if isinstance(value, bytes):
        return decode_text(value).strip()
    return str(value).strip() if isinstance(value, str) else ""


def _info(document: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for info in document.info or []:
        for key in ("Title", "Author", "CreationDate", "doi"):
            if key in info and key.lower() not in found:
                text = _decoded(info[key])
                if text:
                    found[key.lower()] = text
    return found


def _box(element: Any) -> dict[str, Any] | None:
    from pdfminer.layout import LTChar, LTTextLine

    lines = []
    for line in element:
        if not isinstance(line, LTTextLine):
            continue
        text = line.get_text().rstrip("\n")
        if not text.strip():
            continue
        sizes = [c.size for c in line if isinstance(c, LTChar)]
        size = max(set(sizes), key=sizes.count) if sizes else 0.0
        lines.append({"text": text, "size": round(size, 2), "y0": line.y0, "y1": line.y1})
    if not lines:
        return None
    return {"x0": element.x0, "x1": element.x1, "y0": element.y0, "y1": element.y1, "lines": lines}


def read(data: bytes) -> dict[str, Any]:
    import io

    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams, LTTextBox
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    parser = PDFParser(io.BytesIO(data))
    document = PDFDocument(parser)
    if not document.is_extractable:
        raise ValueError("the PDF forbids text extraction")
    manager = PDFResourceManager()
    device = PDFPageAggregator(manager, laparams=LAParams())
    interpreter = PDFPageInterpreter(manager, device)
    pages: list[list[dict[str, Any]]] = []
    for page in PDFPage.create_pages(document):
        interpreter.process_page(page)
        layout = device.get_result()
        boxes = [b for b in (_box(e) for e in layout if isinstance(e, LTTextBox)) if b]
        pages.append(boxes)
    return {"pages": pages, "info": _info(document)}


def main() -> int:
    import logging

    logging.disable(logging.WARNING)  # pdfminer warns on every oddity of real-world PDFs
    data = sys.stdin.buffer.read()
    try:
        result = read(data)
    except MemoryError:
        sys.stderr.write("out of memory\n")
        return 3
    except Exception as exc:  # pdfminer raises many types (PDFSyntaxError, PSEOF, KeyError, ...)
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        sys.stderr.write(f"{type(exc).__name__}: {text}\n")
        return 2
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
