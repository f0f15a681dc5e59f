"""Documents into passages: the unit of search, each with its document, section or page, and a stable anchor.

Markdown and the built-in corpus: one passage per ``##`` or ``###`` section (anchor from ``{#id}`` or the
title); a ``Sources:`` line at the end of a section lists where its facts come from. HTML: one passage per
h1-h3 section (anchor from the heading's id). PDF: one passage per page (anchor ``p<N>``, through pypdf).
Plain text: paragraphs grouped to about 2,000 characters.
"""

from __future__ import annotations

import logging
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from kernelpilot.errors import InputFormatError, KernelpilotError

__all__ = ["Passage", "read_document", "slug", "SUFFIXES"]

SUFFIXES = (".md", ".markdown", ".html", ".htm", ".pdf", ".txt")


@dataclass
class Passage:
    document: str              # file name (without folder) or built-in document name
    section: str               # heading, or "page N"
    anchor: str                # stable within the document
    text: str
    page: int | None = None
    sources: list[str] = field(default_factory=list)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "section"


_HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*(?:\{#([A-Za-z0-9_.-]+)\})?\s*$")


def _markdown(text: str, document: str) -> list[Passage]:
    out: list[Passage] = []
    title, anchor, body = document, slug(document), []

    def flush() -> None:
        lines = [line for line in body]
        sources = []
        for i, line in enumerate(lines):
            if line.lower().startswith("sources:"):
                sources = [s.strip() for s in line.split(":", 1)[1].split(";") if s.strip()]
                lines[i] = ""
        content = "\n".join(lines).strip()
        if content:
            out.append(Passage(document, title, anchor, content, sources=sources))

    seen: dict[str, int] = {}
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m and len(m.group(1)) == 1:
            continue                    # the document's title: it names the document, not a passage
        if m and len(m.group(1)) >= 2:
            flush()
            title = m.group(2)
            base = m.group(3) or slug(title)
            seen[base] = seen.get(base, 0) + 1
            anchor = base if seen[base] == 1 else f"{base}-{seen[base]}"
            body = []
        else:
            body.append(line)
    flush()
    return out


class _Html(HTMLParser):
    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.document = document
        self.passages: list[Passage] = []
        self.title, self.anchor, self.body = document, slug(document), []
        self.in_heading: str | None = None
        self.heading_text: list[str] = []
        self.heading_id: str | None = None
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        elif tag in ("h1", "h2", "h3"):
            self.flush()
            self.in_heading, self.heading_text = tag, []
            self.heading_id = dict(attrs).get("id")
        elif tag in ("p", "br", "li", "tr", "div"):
            self.body.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == self.in_heading:
            self.title = " ".join("".join(self.heading_text).split()) or self.document
            self.anchor = self.heading_id or slug(self.title)
            self.in_heading, self.body = None, []

    def handle_data(self, data):
        if self.skip:
            return
        (self.heading_text if self.in_heading else self.body).append(data)

    def flush(self) -> None:
        text = re.sub(r"[ \t]+", " ", "".join(self.body))
        text = re.sub(r"\n\s*\n+", "\n\n", text).strip()
        if text:
            self.passages.append(Passage(self.document, self.title, self.anchor, text))
        self.body = []


def _pdf(path: Path) -> list[Passage]:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise KernelpilotError("reading PDFs needs pypdf: pip install 'kernelpilot[docs]'.") from None
    # pypdf logs what it repairs (a missing EOF marker...) as warnings: the reader's verdict is the error below.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            raise InputFormatError(str(path), "the PDF is encrypted; decrypt it first (for example with qpdf "
                                              "--decrypt) and add the copy.")
        out = []
        for i, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if text:
                out.append(Passage(path.name, f"page {i}", f"p{i}", text, page=i))
        return out
    except InputFormatError:
        raise
    except (PdfReadError, ValueError, KeyError) as e:
        raise InputFormatError(str(path), f"not a readable PDF ({e}).") from None
    except Exception as e:  # noqa: BLE001 - pypdf meets a malformed file in many ways (limits, bad streams)
        raise InputFormatError(str(path), f"not a readable PDF ({type(e).__name__}: {e}).") from None


def _plain(text: str, document: str) -> list[Passage]:
    out, chunk, n = [], [], 0
    for para in re.split(r"\n\s*\n", text):
        chunk.append(para.strip())
        if sum(len(c) for c in chunk) > 2000:
            n += 1
            out.append(Passage(document, f"part {n}", f"part-{n}", "\n\n".join(chunk)))
            chunk = []
    if any(chunk):
        n += 1
        out.append(Passage(document, f"part {n}", f"part-{n}", "\n\n".join(c for c in chunk if c)))
    return out


# A document larger than this is refused rather than read into memory.
MAX_DOCUMENT_BYTES = 512 << 20


def read_document(path: Path) -> list[Passage]:
    """The passages of one file, by its suffix. Only a regular file is read (a FIFO or a device would block)."""
    try:
        st = path.stat()
    except OSError as e:
        raise InputFormatError(str(path), f"cannot be read ({e.strerror or e}).") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputFormatError(str(path), "not a regular file (a pipe, a device or a socket); give a document.")
    if st.st_size > MAX_DOCUMENT_BYTES:
        raise InputFormatError(str(path), f"{st.st_size >> 20} MiB: larger than the {MAX_DOCUMENT_BYTES >> 20} MiB "
                                          "a document may have.")
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return _pdf(path)
    data = path.read_bytes()
    if b"\0" in data[:4096]:
        raise InputFormatError(str(path), "a binary file, not Markdown, HTML or text.")
    text = data.decode("utf-8", "replace")
    if suffix in (".md", ".markdown"):
        return _markdown(text, path.name)
    if suffix in (".html", ".htm"):
        p = _Html(path.name)
        p.feed(text)
        p.flush()
        return p.passages
    if suffix == ".txt":
        return _plain(text, path.name)
    raise InputFormatError(str(path), f"not a document kernelpilot reads ({', '.join(SUFFIXES)}).")
