"""The documentation index: passages of the built-in corpus and of the user's own documents in SQLite full-text
search (FTS5, bm25 ranking, section titles weighted above body text), stored per user
(``$KPILOT_DOCS_DB``, else ``~/.local/share/kpilot/docs.db``).

A citation names a passage: ``CORPUS/DOCUMENT#ANCHOR`` (``builtin/amdgcn.md#dpp-row-bcast``,
``mi300-isa/mi300-isa.pdf#p212``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelpilot.docs.passages import SUFFIXES, Passage, read_document
from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["Hit", "DocsIndex", "default_path", "BUILTIN", "CORPUS_DIR"]

BUILTIN = "builtin"
CORPUS_DIR = Path(__file__).resolve().parent / "corpus"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS corpora (name TEXT PRIMARY KEY, source TEXT, added REAL, digest TEXT, passages INTEGER);
CREATE TABLE IF NOT EXISTS passages (id INTEGER PRIMARY KEY, corpus TEXT NOT NULL, document TEXT NOT NULL,
    section TEXT NOT NULL, anchor TEXT NOT NULL, page INTEGER, text TEXT NOT NULL, sources TEXT);
CREATE INDEX IF NOT EXISTS passages_by_corpus ON passages(corpus);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(section, text, content='passages', content_rowid='id',
    tokenize='porter unicode61');
"""


def default_path() -> Path:
    if os.environ.get("KPILOT_DOCS_DB"):
        return Path(os.environ["KPILOT_DOCS_DB"])
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "kpilot" / "docs.db"


@dataclass
class Hit:
    citation: str
    corpus: str
    document: str
    section: str
    anchor: str
    page: int | None
    score: float
    snippet: str
    sources: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Distinct words of a query used at most: more add nothing to a ranking and slow every match.
MAX_QUERY_WORDS = 32


def _query_words(query: str) -> list[str]:
    """The query's distinct words (letters, digits, underscores), in order, at most ``MAX_QUERY_WORDS``."""
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z0-9_]+", query)))
    if not words:
        raise UsageError("the query has no words to search for.")
    return words[:MAX_QUERY_WORDS]


def _fts_query(words: list[str], mode: str) -> str:
    """``words`` as quoted FTS5 terms (no FTS syntax reaches the engine), joined by AND or OR. With OR, a word's
    parts between underscores count too (``v_add_f32_dpp`` finds passages on ``_dpp`` and ``v_add_f32``)."""
    terms = list(words)
    if mode == "OR":
        terms += [p for w in words if "_" in w for p in w.split("_") if len(p) > 1]
    return f" {mode} ".join(f'"{t}"' for t in dict.fromkeys(terms))


class DocsIndex:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or default_path())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=30.0)
            self.db.executescript(_SCHEMA)
        except (sqlite3.DatabaseError, ValueError) as e:    # ValueError: SQLite's message itself is not UTF-8
            raise KernelpilotError(f"{self.path}: not a kernelpilot docs index ({e}).") from None
        self._ensure_builtin()

    # ------------------------------------------------------------------ corpora

    def _ensure_builtin(self) -> None:
        files = sorted(CORPUS_DIR.glob("*.md"))
        digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()[:16]
        row = self.db.execute("SELECT digest FROM corpora WHERE name = ?", (BUILTIN,)).fetchone()
        if row and row[0] == digest:
            return
        passages = [p for f in files for p in read_document(f)]
        self._replace(BUILTIN, str(CORPUS_DIR), digest, passages)

    def _replace(self, name: str, source: str, digest: str, passages: list[Passage]) -> None:
        with self.db:
            self._delete(name)
            for p in passages:
                cur = self.db.execute(
                    "INSERT INTO passages (corpus, document, section, anchor, page, text, sources) VALUES (?,?,?,?,?,?,?)",
                    (name, p.document, p.section, p.anchor, p.page, p.text, "; ".join(p.sources)))
                self.db.execute("INSERT INTO passages_fts (rowid, section, text) VALUES (?, ?, ?)",
                                (cur.lastrowid, p.section, p.text))
            self.db.execute("INSERT INTO corpora VALUES (?, ?, ?, ?, ?)", (name, source, time.time(), digest,
                                                                          len(passages)))

    def _delete(self, name: str) -> None:
        rows = self.db.execute("SELECT id, section, text FROM passages WHERE corpus = ?", (name,)).fetchall()
        for rid, section, text in rows:
            self.db.execute("INSERT INTO passages_fts (passages_fts, rowid, section, text) VALUES ('delete', ?, ?, ?)",
                            (rid, section, text))
        self.db.execute("DELETE FROM passages WHERE corpus = ?", (name,))
        self.db.execute("DELETE FROM corpora WHERE name = ?", (name,))

    def add(self, path: Path, name: str | None = None) -> dict[str, Any]:
        """Index a document or a folder of them as corpus ``name`` (default: the file or folder name)."""
        path = Path(path)
        if not path.exists():
            raise KernelpilotError(f"{path}: no such file or folder.")
        name = name or slug_name(path)
        if name == BUILTIN:
            raise UsageError(f"{BUILTIN!r} is the built-in corpus; choose another --name.")
        files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES) \
            if path.is_dir() else [path]
        if not files:
            raise KernelpilotError(f"{path}: no documents in it ({', '.join(SUFFIXES)}).")
        passages = [p for f in files for p in read_document(f)]
        if not passages:
            raise KernelpilotError(f"{path}: no text could be read from it (a scanned PDF needs OCR first).")
        self._replace(name, str(path.resolve()), "", passages)
        return {"corpus": name, "documents": len(files), "passages": len(passages)}

    def remove(self, name: str) -> None:
        if name == BUILTIN:
            raise UsageError("the built-in corpus cannot be removed.")
        if not self.db.execute("SELECT 1 FROM corpora WHERE name = ?", (name,)).fetchone():
            raise KernelpilotError(f"no corpus named {name!r}; `kpilot docs list` shows them.")
        with self.db:
            self._delete(name)

    def corpora(self) -> list[dict[str, Any]]:
        return [{"name": r[0], "source": r[1], "added": r[2], "passages": r[4]}
                for r in self.db.execute("SELECT * FROM corpora ORDER BY name")]

    # ------------------------------------------------------------------ search

    def search(self, query: str, *, corpus: str | None = None, limit: int = 5) -> list[Hit]:
        if corpus is not None and not self.db.execute("SELECT 1 FROM corpora WHERE name = ?", (corpus,)).fetchone():
            raise KernelpilotError(f"no corpus named {corpus!r}; `kpilot docs list` shows them.")
        words = _query_words(query)
        hits: list[Hit] = []
        for mode in ("AND", "OR"):      # passages with every word first, then those with any, ranked after them
            sql = ("SELECT p.corpus, p.document, p.section, p.anchor, p.page, bm25(passages_fts, 4.0, 1.0), "
                   "snippet(passages_fts, 1, '[', ']', ' ... ', 24), p.sources FROM passages_fts "
                   "JOIN passages p ON p.id = passages_fts.rowid WHERE passages_fts MATCH ?")
            args: list[Any] = [_fts_query(words, mode)]
            if corpus:
                sql += " AND p.corpus = ?"
                args.append(corpus)
            rows = self.db.execute(sql + " ORDER BY bm25(passages_fts, 4.0, 1.0) LIMIT ?", (*args, limit)).fetchall()
            seen = {h.citation for h in hits}
            for r in rows:
                hit = Hit(f"{r[0]}/{r[1]}#{r[3]}", r[0], r[1], r[2], r[3], r[4], round(-r[5], 3),
                          " ".join(r[6].split()), [s for s in (r[7] or "").split("; ") if s])
                if hit.citation not in seen and len(hits) < limit:
                    hits.append(hit)
            if len(hits) >= limit:
                break
        return hits

    def show(self, citation: str) -> dict[str, Any]:
        m = re.fullmatch(r"([^/]+)/(.+)#(.+)", citation.strip())
        if not m:
            raise UsageError(f"{citation!r} is not a citation: CORPUS/DOCUMENT#ANCHOR, as search prints them.")
        row = self.db.execute("SELECT id, section, page, text, sources FROM passages WHERE corpus = ? AND document = ? "
                              "AND anchor = ?", m.groups()).fetchone()
        if row is None:
            raise KernelpilotError(f"no passage {citation}.")
        rid = row[0]
        near = self.db.execute("SELECT section, anchor FROM passages WHERE corpus = ? AND document = ? AND id IN (?, ?) "
                               "ORDER BY id", (m.group(1), m.group(2), rid - 1, rid + 1)).fetchall()
        return {"citation": citation, "section": row[1], "page": row[2], "text": row[3],
                "sources": [s for s in (row[4] or "").split("; ") if s],
                "neighbours": [f"{m.group(1)}/{m.group(2)}#{a} ({s})" for s, a in near]}

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> DocsIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def slug_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem if path.is_file() else path.name).strip("-").lower() or "docs"
