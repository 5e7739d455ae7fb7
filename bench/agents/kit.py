"""How an agent domain is written and built into a `reflexa eval` dataset.

A domain is a module of bench/agents/tune/ or bench/agents/confirm/ with:

    TABLES     {table: "CREATE TABLE ..."}: names a model would not guess
    rows(rng)  {table: [row, ...]}: the data, from a seeded random.Random
    API        the source of api.py: @tools over the same database (lookups by name, lists by id), its
               docstring the API's description (an MCP server's instructions)
    QUESTIONS  [Question(...)]: each with the SQL of its gold answer(s) and the tools it is asked with

`build(module, folder)` writes the domain's folder (domain.sqlite, api.py, check.py, inject.py, server.py,
noisy_api.py, flaky_api.py, answers.json) and returns its dataset lines: task specs whose paths are relative
to the dataset's folder, each with a validator that says only "does not match" and a score that the loop
does not see (a regex over the gold values). A question's `tools` is "sql" (the bundled SQL toolset on the
database), "api" (api.py as a `tools` file) or "mcp" (api.py served by server.py); its `fault` injects one
(runtime/inject.py; a domain's api.py may define faults of its own, FIRST_CALL_FAULTS). A domain may give
`build_db(path)` instead of TABLES and rows, and a question its own MCP server command.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

RUNTIME = Path(__file__).parent / "runtime"
SEED = 20261207
"""Every domain's data comes from random.Random(SEED + crc32 of its name): the same files on every build."""
API_FAULTS = ("none", "noisy", "flaky")
MCP_FAULTS = ("none", "reset", "gateway", "ratelimit", "stall")


@dataclass(frozen=True)
class Question:
    """One task of a domain."""

    id: str
    """Unique within the domain; the task's id is DOMAIN-ID."""
    text: str
    gold: str | list[str]
    """SQL (or several) whose first value is what the answer must hold; several: all of them."""
    kind: str
    """count, filter, lookup, argmax, join, chain (2-3 tool calls in sequence), composite (for plan)."""
    tools: str = "sql"
    fault: str = "none"
    loop: str = "react"
    facts: list[str] = field(default_factory=list)
    """plan: facts every sub-goal sees."""
    server: str | None = None
    """An MCP server's command of the domain's own (run in its folder), instead of server.py."""


def build(domain: ModuleType, folder: Path) -> list[dict[str, Any]]:
    """Write the domain's folder and return its dataset lines (paths relative to folder's parent)."""
    name = folder.name
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "domain.sqlite.new"  # built aside, and moved in only if it changed: a run may be reading it
    db.unlink(missing_ok=True)
    if hasattr(domain, "build_db"):  # a database a script of its own makes (the shop's)
        domain.build_db(db)
    with sqlite3.connect(db) as conn:
        for create in getattr(domain, "TABLES", {}).values():
            conn.execute(create)
        data = domain.rows(random.Random(SEED + zlib.crc32(name.encode()))) if hasattr(domain, "rows") else {}
        for table, rows in data.items():
            if rows:
                conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        golds = {f"{name}-{q.id}": [_value(conn, sql) for sql in ([q.gold] if isinstance(q.gold, str) else q.gold)]
                 for q in domain.QUESTIONS}
    conn.close()
    if _dump(db) != _dump(folder / "domain.sqlite"):
        db.replace(folder / "domain.sqlite")
    db.unlink(missing_ok=True)
    shutil.copyfile(RUNTIME / "check.py", folder / "check.py")
    if hasattr(domain, "API"):  # the domain's own API, in process and over MCP
        _write(folder / "api.py", domain.API)
        for runtime in ("inject.py", "server.py"):
            shutil.copyfile(RUNTIME / runtime, folder / runtime)
        for fault in API_FAULTS[1:]:
            _write(folder / f"{fault}_api.py", FAULTY_API.format(fault=fault))
    _write(folder / "answers.json", json.dumps(golds, indent=1, ensure_ascii=False) + "\n")
    return [_line(name, q, golds[f"{name}-{q.id}"]) for q in domain.QUESTIONS]


FAULTY_API = '''"""api.py with the {fault} fault (inject.py)."""

import importlib.util
import sys
from pathlib import Path


def _load(name):
    # By path, under a name of this folder's own: every domain has an api.py, and one process runs them all.
    spec = importlib.util.spec_from_file_location(f"{{__name__}}_{{name}}", Path(__file__).parent / f"{{name}}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


globals().update(_load("inject").wrapped(_load("api"), "{fault}"))
'''
"""A tools file that gives api.py's tools with a fault injected."""


def _dump(path: Path) -> list[str] | None:
    """A database's contents as SQL, to compare two builds (the files' bytes differ between builds)."""
    if not path.exists():
        return None
    with sqlite3.connect(path) as conn:
        dumped = list(conn.iterdump())
    conn.close()
    return dumped


def _value(conn: sqlite3.Connection, sql: str) -> str:
    row = conn.execute(sql).fetchone()
    if row is None or row[0] is None:
        raise ValueError(f"gold SQL returned nothing: {sql}")
    value = row[0]
    return f"{value:g}" if isinstance(value, float) else str(value)


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _line(name: str, q: Question, golds: list[str]) -> dict[str, Any]:
    line: dict[str, Any] = {"id": f"{name}-{q.id}", "loop": q.loop, "task": q.text, "workdir": name,
                            "validate": f"python3 check.py {name}-{q.id}"}
    if q.tools == "sql":
        assert q.fault == "none", f"{q.id}: the bundled SQL tools take no injected fault"
        line["db"] = "domain.sqlite"
    elif q.tools == "api":
        assert q.fault in API_FAULTS, f"{q.id}: api fault {q.fault}"
        line["tools"] = ["api.py" if q.fault == "none" else f"{q.fault}_api.py"]
    elif q.server is not None:
        line["mcp"] = [q.server]
    else:  # server.py takes the runtime's faults and any the domain's api.py defines (FIRST_CALL_FAULTS)
        line["mcp"] = [f"python3 server.py --fault {q.fault}"]
    if q.facts:
        line["facts"] = q.facts
    line["score"] = {"regex": gold_regex(golds)}
    line["meta"] = {"domain": name, "kind": q.kind, "tools": q.tools, "fault": q.fault}
    return line


def gold_regex(golds: list[str]) -> str:
    """A regex an answer matches when it holds every gold value: a number as a number (12 is 12 or 12.0, not
    112), a text without case."""
    parts = []
    for gold in golds:
        try:
            number = float(gold)
        except ValueError:
            parts.append(rf"(?=.*{_text(gold)})")
            continue
        whole = f"{number:g}" if number != int(number) else str(int(number))
        digits = re.escape(whole).replace(r"\.", r"\.") + (r"(?:\.0+)?" if "." not in whole else "0*")
        parts.append(rf"(?=.*(?<![\d.]){digits}(?![\d]))")
    return "(?is)^" + "".join(parts)


def _text(gold: str) -> str:
    words = [re.escape(word) for word in re.findall(r"\w+", gold)]
    return r"\b" + r"\W+".join(words) + r"\b"
