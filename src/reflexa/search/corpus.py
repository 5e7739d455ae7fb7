"""The default search backend: a local corpus in SQLite FTS5, ranked by BM25.

Files (.md, .txt, .html, and .pdf with the `pdf` extra) are chunked into passages that keep their title,
path and position. Indexing is incremental by content hash: an unchanged file is skipped, a changed one
re-chunked, a deleted one dropped.
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import logging
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .base import Evidence

SUFFIXES = (".md", ".txt", ".html", ".htm", ".pdf")
"""PDF needs the `pdf` extra (pypdf); without it PDF files are skipped and counted as such."""
PASSAGE_CHARS = 800
"""A passage is about this long: a few paragraphs, cut at paragraph or sentence ends."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
    title, body, path UNINDEXED, position UNINDEXED, tokenize = 'porter unicode61'
);
"""

_TAG = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


def _text(path: Path) -> tuple[str, str]:
    """(title, plain text) of one file."""
    if path.suffix.lower() == ".pdf":
        from pypdf import PdfReader  # optional: the caller skips PDFs when pypdf is missing

        logging.getLogger("pypdf").setLevel(logging.ERROR)  # a broken file is reported once, by the caller
        reader = PdfReader(path)
        title = (reader.metadata.title if reader.metadata and reader.metadata.title else path.stem)
        return title, "\n\n".join(page.extract_text() or "" for page in reader.pages)
    raw = path.read_text(errors="replace")
    if path.suffix.lower() in (".html", ".htm"):
        found = re.search(r"<title>(.*?)</title>", raw, re.DOTALL | re.IGNORECASE)
        body = html.unescape(_TAG.sub(" ", raw))
        return (html.unescape(found.group(1)).strip() if found else path.stem), body
    heading = re.search(r"^#\s+(.+)$", raw, re.MULTILINE)
    return (heading.group(1).strip() if heading else path.stem), raw


def _cut(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters, cut at the last space before the limit where there is one."""
    pieces = []
    while len(text) > size:
        at = text.rfind(" ", 0, size + 1)
        at = at if at > 0 else size
        pieces.append(text[:at].rstrip())
        text = text[at:].lstrip()
    return [*pieces, text] if text else pieces


def chunk(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """Passages of about `size` characters, cut between paragraphs (or sentences in a long one); a sentence
    longer than `size` (minified text, a table, no full stops) is cut too, so no passage grows unbounded."""
    pieces = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    passages, current = [], ""
    for piece in pieces:
        sentences = [piece] if len(piece) <= size else re.split(r"(?<=[.!?])\s+", piece)
        for part in (cut for sentence in sentences for cut in _cut(sentence, size)):
            if current and len(current) + len(part) + 1 > size:
                passages.append(current)
                current = ""
            current = f"{current}\n{part}".strip()
    if current:
        passages.append(current)
    return passages


@dataclass(frozen=True, slots=True)
class IndexReport:
    added: int
    updated: int
    unchanged: int
    removed: int
    passages: int
    skipped: int = 0
    """Files that could not be read: PDFs without the `pdf` extra, and the `unreadable` ones."""
    unreadable: tuple[str, ...] = ()
    """Files whose parsing failed (a broken PDF, say), by path in the folder."""


INDEX_BUSY_SECONDS = 300.0
"""How long opening or updating an index waits for another process that is writing it (two batch tasks
on one corpus, two `reflexa index` runs): indexing a large folder takes minutes, and the second then finds
its files unchanged. SQLite's default, 5 s, failed them with "database is locked"."""


def _hint(exc: Exception) -> str:
    if "locked" in str(exc):
        return "another process is writing this index; try again when it is done"
    return "the corpus folder must be writable (the index is kept in it)"


class LocalCorpus:
    """Passages of a folder of documents, searchable by BM25."""

    name = "local"

    def __init__(self, index_path: str | Path) -> None:
        self.path = Path(index_path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, check_same_thread=False, timeout=INDEX_BUSY_SECONDS)
            self.db.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:  # a read-only folder, say: the index lives beside the documents
            raise ConfigError(f"cannot open the search index {self.path}: {exc}", hint=_hint(exc)) from None

    @classmethod
    def for_folder(cls, folder: str | Path) -> LocalCorpus:
        """The corpus whose index lives beside the documents, in `<folder>/.reflexa-index.sqlite`."""
        folder = Path(folder)
        if not folder.is_dir():
            what = "is a file, not a folder" if folder.is_file() else "not found"
            raise ConfigError(f"corpus folder {what}: {folder}", hint="give a folder of .md, .txt or .html files")
        return cls(folder / ".reflexa-index.sqlite")

    def index(self, folder: str | Path) -> IndexReport:
        try:
            return self._index(Path(folder).resolve())
        except sqlite3.OperationalError as exc:  # another process held the index past INDEX_BUSY_SECONDS
            raise ConfigError(f"cannot update the search index {self.path}: {exc}", hint=_hint(exc)) from None

    def _index(self, folder: Path) -> IndexReport:
        seen, added, updated, unchanged, skipped, unreadable = set(), 0, 0, 0, 0, []
        can_pdf = importlib.util.find_spec("pypdf") is not None
        known = dict(self.db.execute("SELECT path, sha256 FROM files"))
        with self.db:
            for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file()):
                key = str(path.relative_to(folder))
                try:
                    key.encode("utf-8")
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                except (UnicodeEncodeError, OSError):  # a name that is not UTF-8 (SQLite cannot hold it), no access
                    skipped += 1
                    unreadable.append(key.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
                    continue
                seen.add(key)
                if known.get(key) == digest:
                    unchanged += 1
                    continue
                if path.suffix.lower() == ".pdf" and not can_pdf:
                    skipped += 1
                    continue
                try:
                    title, text = _text(path)
                except Exception:  # noqa: BLE001 - a broken file must not stop the index: name it and go on
                    skipped += 1
                    unreadable.append(key)
                    continue
                self.db.execute("DELETE FROM passages WHERE path = ?", (key,))
                self.db.executemany("INSERT INTO passages (title, body, path, position) VALUES (?, ?, ?, ?)",
                                    [(title, p, key, i) for i, p in enumerate(chunk(text))])
                self.db.execute("INSERT OR REPLACE INTO files VALUES (?, ?)", (key, digest))
                added, updated = (added + 1, updated) if key not in known else (added, updated + 1)
            removed = [k for k in known if k not in seen]
            for key in removed:
                self.db.execute("DELETE FROM passages WHERE path = ?", (key,))
                self.db.execute("DELETE FROM files WHERE path = ?", (key,))
        total = self.db.execute("SELECT count(*) FROM passages").fetchone()[0]
        return IndexReport(added, updated, unchanged, len(removed), total, skipped, tuple(unreadable))

    @property
    def cache_key(self) -> str:
        """What the search cache keys this corpus's results by: the documents it holds. Another corpus, or
        this one re-indexed after an edit, never gets the passages cached for a different one."""
        files = self.db.execute("SELECT path, sha256 FROM files ORDER BY path").fetchall()
        passages = self.db.execute("SELECT count(*), max(rowid) FROM passages").fetchone()  # add_passages' too
        return f"local:{hashlib.blake2b(repr((files, passages)).encode(), digest_size=8).hexdigest()}"

    def add_passages(self, rows: list[tuple[str, str, str, int]]) -> None:
        """Add (title, body, path, position) passages directly, e.g. a benchmark's own corpus."""
        with self.db:
            self.db.executemany("INSERT INTO passages (title, body, path, position) VALUES (?, ?, ?, ?)", rows)

    def _ranked(self, match: str, k: int) -> list[tuple]:
        return self.db.execute(
            "SELECT title, body, path, position, bm25(passages) AS rank FROM passages WHERE passages MATCH ? "
            "ORDER BY rank LIMIT ?", (match, k)).fetchall()

    def search(self, query: str, k: int = 5) -> list[Evidence]:
        # Each word becomes a quoted FTS term: user text never reaches FTS syntax. Not lower-cased here: FTS
        # folds case itself, and Python's lower() makes "İstanbul" "i̇stanbul", two words around a combining dot.
        terms = [f'"{w}"' for w in _WORD.findall(query) if len(w) > 1]
        if not terms:
            return []
        # Passages holding every term first (cheap: few rows to rank); only when those are too few, any term.
        rows = self._ranked(" ".join(terms), k)
        if len(rows) < k and len(terms) > 1:
            seen = {(r[2], r[3]) for r in rows}
            rows += [r for r in self._ranked(" OR ".join(terms), k) if (r[2], r[3]) not in seen]
            rows = rows[:k]
        return [Evidence(id=f"{path}#{position}", source=f"{path}#{position}", title=title, snippet=body,
                         score=-rank) for title, body, path, position, rank in rows]
