"""The results file: one JSON object a line, appended as tasks finish, never half-written.

Each row is written with one `write` call of the whole line, then flushed and fsynced, so a kill leaves at
most a partial last line, which the next run of the command cuts off before it appends. Rows of other
batches or evals in the same file are kept and ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError

ROW_START = b'{"batch": '
"""How every row begins (json.dumps of a row, "batch" its first key): a partial last line that begins so
is a row a kill cut short, and is cut off; any other is the user's and is left alone."""


def own_rows(data: bytes, batch_id: str) -> Iterator[dict[str, Any]]:
    """The whole rows of batch (or eval) `batch_id` in a results file's bytes; other lines are skipped (a
    results file is the user's to edit)."""
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("batch") == batch_id and isinstance(row.get("key"), str):
            yield row


class ResultsFile:
    """An append-only JSONL file of result rows; `keys` are the tasks of this batch already in it."""

    def __init__(self, path: Path, batch_id: str) -> None:
        self.path = path
        self.batch_id = batch_id
        self.keys: set[str] = set()
        self._dirty = False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._repair()
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write the results file {path}: {exc.strerror or exc}") from None

    def _repair(self) -> None:
        """Cut a partial last line (a write that a kill interrupted) and read which tasks are in."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            if not data[end:].startswith(ROW_START):  # not a row of ours cut short: someone else's text
                raise ConfigError(f"{self.path} does not end with a whole line, and is not a results file this "
                                  "command wrote", hint="give --out a new file, or the batch's own results file")
            with self.path.open("r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
        self.keys.update(row["key"] for row in own_rows(data[:end], self.batch_id))

    def append(self, row: dict[str, Any], *, sync: bool = True) -> bool:
        """Write a row unless its task is in already; True when written. Durable when this returns, unless
        `sync` is False: then at the next `sync()` (the driver syncs once per batch of rows it collects)."""
        if row["key"] in self.keys:
            return False
        line = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
        written = os.write(self.fd, line)
        if written != len(line):  # a short write (disk full): a partial line, which the next run cuts off
            raise OSError(f"short write to {self.path}")
        self.keys.add(row["key"])
        self._dirty = True
        if sync:
            self.sync()
        return True

    def sync(self) -> None:
        """Make the rows written so far durable (fsync)."""
        if self._dirty:
            os.fsync(self.fd)
            self._dirty = False

    def close(self) -> None:
        self.sync()
        os.close(self.fd)

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
