"""The bundled SQL toolset: list_tables, describe_table and query over one SQLite file, read-only by default.

Errors name close matches ("no such column: nme" suggests `name`), so the classifier can repair a
typo by rule, with no model call.
"""

from __future__ import annotations

import difflib
import itertools
import re
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError
from ..files import file_uri
from ..types import ErrorCode, cap
from .registry import TOOL_TIMEOUT, Tool, ToolError, sqlite_error_code, tool

QUERY_SECONDS = TOOL_TIMEOUT - 1
"""A read-only query is stopped by SQLite after this long, a second before its tool call times out."""
PROGRESS_STEPS = 10_000
"""SQLite virtual-machine steps between two looks at the clock (a fraction of a millisecond)."""
MAX_ROWS = 200
"""Rows a query returns at most; the rest is reported as a count."""
MAX_COUNTED = 100_000
"""Rows past MAX_ROWS counted at most for that report: a bound on a huge result's cost."""
EQUALS_TEXT = re.compile(r"\b(\w+)\s*=\s*'([^']*)'")
MAX_FILTER_NOTES = 3
"""Text filters checked per query, at most."""
PLAIN_SELECT = re.compile(r"\s*SELECT\s+(.+?)\s+FROM\s+[\"`\[]?(\w+)[\"`\]]?\s*;?\s*", re.IGNORECASE | re.DOTALL)
"""A query that selects from one table and does nothing else: the only shape whose unknown table or selected
column, when it is a stored value, is rewritten into a filter by rule."""
MAX_HOLDER_COLUMNS = 50
"""Text columns searched for an unknown table or column name that is really a stored value ("tent")."""
MAX_DISTINCT = 5000
"""Distinct values read per column when a filter matches nothing: a bound on the cost of the note."""
VALUE_REPAIR = 0.8
"""A filter value that matches nothing is offered its closest stored value as a repair (a NOT_FOUND with the
fixed query, which the classifier applies by rule) only when they are at least this similar ('Lisboa' and
'Lisbon': 0.83); a looser match ('Kyo' for 'Kyoto', 'Paris' for 'Parma') is named in a note and left to the
agent, since a value, unlike a misspelt column, can mean something else."""


SCHEMA_VALUES = 12
"""A text column with at most this many distinct values lists them in the schema shown up front; one with
more shows two examples: the values a filter compares with ('GC', not 'globular cluster')."""
SCHEMA_SAMPLE = 5000
"""Rows of a table read at most to find a column's distinct values: a bound on a large table's cost."""
SCHEMA_CHARS = 2000
"""The schema shown up front at most; past it, values are left out, then the columns of later tables."""


def _no_attach(action: int, *args: object) -> int:
    return sqlite3.SQLITE_DENY if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH) else sqlite3.SQLITE_OK


TABLES_NAMED = re.compile(r"\b(?:FROM|JOIN)\s+[\"`\[]?(\w+)", re.IGNORECASE)
"""The tables a query reads: an unknown column's message lists their columns, not the whole database's."""


class Database:
    """One SQLite file, as the SQL tools see it: connections, its schema, and errors that name what exists."""

    def __init__(self, path: Path, write: bool) -> None:
        self.path, self.write = path, write

    def connect(self, writable: bool = False) -> sqlite3.Connection:
        # A connection per call (tools run in worker threads); only `execute` ever gets a writable one,
        # so a change can never slip through `query` around the side-effect bookkeeping.
        conn = sqlite3.connect(file_uri(self.path, "rw" if writable else "ro"), uri=True, timeout=5)
        if not writable:
            conn.execute("PRAGMA query_only=ON")
            conn.set_authorizer(_no_attach)  # ATTACH creates a missing file, read-only connection or not
            # SQLite itself stops a runaway query, just before the tool is abandoned at its timeout (an
            # abandoned Python thread cannot be killed, and would go on burning a core).
            deadline = time.monotonic() + QUERY_SECONDS
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
        return conn

    @staticmethod
    def tables(conn: sqlite3.Connection) -> list[str]:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]

    @staticmethod
    def columns(conn: sqlite3.Connection, table: str) -> list[str]:
        return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]

    def columns_read(self, conn: sqlite3.Connection, sql: str) -> tuple[list[str], str]:
        """The columns of the tables `sql` reads (every table's when it names none that exists), and which."""
        known = self.tables(conn)
        mentioned = {name.lower() for name in TABLES_NAMED.findall(sql)}
        named = [t for t in known if t.lower() in mentioned]
        where = named or known
        columns = sorted({c for t in where for c in self.columns(conn, t)})
        return columns, (f"columns of {', '.join(named)}" if named else "columns")

    def fail(self, conn: sqlite3.Connection, exc: sqlite3.Error, sql: str) -> ToolError:
        """A failed statement as a tool error that names a close match, or what exists."""
        message, suggestion = str(exc), None
        if match := re.search(r"no such (column|table): ([\w.]+)", message):
            kind, named = match.groups()
            qualifier, _, wrong = named.rpartition(".")
            pool, label = self.columns_read(conn, sql) if kind == "column" else (self.tables(conn), "tables")
            close = _one_close_match(wrong, pool)
            repaired = re.sub(rf"\b{re.escape(wrong)}\b", close, sql) if close else sql
            elsewhere = [] if close or kind != "column" else difflib.get_close_matches(
                wrong, self.columns_read(conn, "")[0], n=1, cutoff=0.6)
            if kind == "column" and qualifier and (owners := self.owners(conn, wrong, sql)):
                # A column of a table the query reads, behind a qualifier that names no table or alias holding
                # it (hv.kg_yield, tgt.scope_cd): one owner says which it is.
                refs = " or ".join(f"{ref}.{wrong}" for ref in owners)
                message += f" (no table or alias {qualifier} of this query has {wrong}: write {refs})"
                if len(owners) == 1:
                    bad = rf"(?<![\w.\"`]){re.escape(qualifier)}\.{re.escape(wrong)}\b"
                    suggestion = {"sql": re.sub(bad, f"{owners[0]}.{wrong}", sql, flags=re.IGNORECASE)}
            elif kind == "column" and (moved := self.other_table(conn, wrong, sql)) is not None:
                table, rewritten = moved
                message += f" ({wrong} is a column of {table}; columns of {table}: " \
                           f"{', '.join(self.columns(conn, table)[:40])})"
                suggestion = {"sql": rewritten} if rewritten else None
            elif close and repaired != sql:
                suggestion = {"sql": repaired}
                message += f" (did you mean {close}?)"
            elif close or elsewhere:  # the name exists (in another table, or behind a wrong alias): no rewrite
                message += f" ({close or elsewhere[0]} is a {kind} of another table, or needs its table's name or " \
                           f"alias; {label}: {', '.join(pool[:40])})"
            else:  # no close match: name what exists, so the next step need not guess
                message += f" ({label}: {', '.join(pool[:40])})"
                note, suggestion = self.stored_value(wrong, kind, sql)
                message += note
        elif match := re.search(r"ambiguous column name: ([\w.]+)", message):
            column = match.group(1).split(".")[-1]
            holders = [t for t in self.tables(conn) if column in self.columns(conn, t)
                       and t.lower() in {n.lower() for n in TABLES_NAMED.findall(sql)}]
            message += f" (qualify it with its table: {' or '.join(f'{t}.{column}' for t in holders)})"
            if (qualified := _qualified(sql, column)) is not None:
                suggestion = {"sql": qualified}
        elif "misuse of aggregate" in message:
            message += " (an aggregate such as count() beside other columns needs GROUP BY those columns)"
        return ToolError(sqlite_error_code(exc), message, suggestion=suggestion)

    def owners(self, conn: sqlite3.Connection, column: str, sql: str) -> list[str]:
        """How the query names each table it reads that has `column`: its alias, else its name."""
        known = {t.lower(): t for t in self.tables(conn)}
        found = []
        for table, alias in READ_TABLE.findall(sql):
            if (name := known.get(table.lower())) is not None and column.lower() in {
                    c.lower() for c in self.columns(conn, name)}:
                found.append(alias or name)
        return list(dict.fromkeys(found))

    def other_table(self, conn: sqlite3.Connection, column: str, sql: str) -> tuple[str, str | None] | None:
        """The one table that has `column` when the query reads another: its name, and the query rewritten
        when the query reads one table: joined to the other on their key (`join_key`) when the two are joined
        by one and no column the query names is in both, else reading the other instead when it has every
        column the query names. None when no table has the column, or several do."""
        holders = [t for t in self.tables(conn) if column in self.columns(conn, t)]
        read = [name for name in self.tables(conn) if name.lower() in {n.lower() for n in TABLES_NAMED.findall(sql)}]
        if len(holders) != 1 or holders[0] in read:
            return None
        table = holders[0]
        if len(read) != 1 or re.search(r"\bjoin\b", sql, re.IGNORECASE):
            return table, None
        (old,) = read
        mine, theirs = ({c.lower() for c in self.columns(conn, t)} for t in (old, table))
        every = {c.lower() for t in self.tables(conn) for c in self.columns(conn, t)}
        named = {word.lower() for word in re.findall(r"\b[A-Za-z_]\w*\b", sql)} & every
        from_old = rf"(\bFROM\s+)[\"`\[]?{re.escape(old)}[\"`\]]?(?=\W|$)"
        on = join_key(conn, old, table)
        if on is not None and named <= mine | theirs and not (named & mine & theirs) - {on[0]} - {on[1]}:
            joined = f"{old} JOIN {table} ON {old}.{on[0]} = {table}.{on[1]}"
            return table, re.sub(from_old, lambda m: m.group(1) + joined, sql, flags=re.IGNORECASE)
        if named <= theirs:
            return table, re.sub(from_old, lambda m: m.group(1) + table, sql, flags=re.IGNORECASE)
        return table, None

    def stored_value(self, wrong: str, kind: str, sql: str) -> tuple[str, dict[str, str] | None]:
        """A name the question used for a stored value ("the tent", "cancelled orders"): the database can
        say where it is, which no model can guess from the schema alone. The note, and a rewrite when the
        query has one reading."""
        holder = self.value_holder(wrong)
        if holder is None:
            return "", None
        table, column, stored = holder
        note = f"; {wrong!r} is a value of {table}.{column}: filter on it, WHERE {column} = {stored!r}"
        literal = stored.replace("'", "''")
        plain = PLAIN_SELECT.fullmatch(sql)  # a filter, join or grouping has more readings than one
        if plain and kind == "table" and plain[2] == wrong:
            # `SELECT price FROM tent` has one reading: the rows whose value it named.
            return note, {"sql": f'SELECT {plain[1]} FROM "{table}" WHERE "{column}" = \'{literal}\''}
        if plain and kind == "column" and plain[1].strip(' "`[]') == wrong and plain[2] == table:
            # `SELECT cancelled FROM orders` has one too: the rows of that table holding it.
            return note, {"sql": f'SELECT * FROM "{table}" WHERE "{column}" = \'{literal}\''}
        return note, None

    def value_holder(self, value: str) -> tuple[str, str, str] | None:
        """The first table and text column holding `value` (in any case), with the value as stored; looked
        up in at most MAX_HOLDER_COLUMNS text columns. None when none does. The scan runs on a read-only
        connection of its own, so the query timeout bounds it even after `execute` failed."""
        try:
            with self.connect() as conn:
                text_columns = [(t, row[1]) for t in self.tables(conn)
                                for row in conn.execute(f'PRAGMA table_info("{t}")')
                                if row[2].upper() in ("TEXT", "") or "CHAR" in row[2].upper()][:MAX_HOLDER_COLUMNS]
                for table, column in text_columns:
                    row = conn.execute(f'SELECT "{column}" FROM "{table}" WHERE lower("{column}") = lower(?) LIMIT 1',
                                       (value,)).fetchone()
                    if row is not None:
                        return table, column, str(row[0])
        except sqlite3.Error:  # the scan ran out of time: no note rather than a late one
            return None
        return None

    def unmatched_values(self, conn: sqlite3.Connection, sql: str) -> list[tuple[str, str, list[str]]]:
        """Each `column = 'text'` filter that no row matches, with the closest stored values: a count of 0
        for a misspelt value looks like an answer, and nothing else would tell the agent."""
        found = []
        for column, value in EQUALS_TEXT.findall(sql)[:MAX_FILTER_NOTES]:
            holders = [t for t in self.tables(conn) if column in self.columns(conn, t)]
            # A one-row probe first: the distinct values are read only when the filter matches nothing.
            if not holders or any(conn.execute(f'SELECT 1 FROM "{t}" WHERE CAST("{column}" AS TEXT) = ? LIMIT 1',
                                               (value,)).fetchone() for t in holders):
                continue
            stored = {str(v) for t in holders
                      for (v,) in conn.execute(f'SELECT DISTINCT "{column}" FROM "{t}" LIMIT {MAX_DISTINCT}')}
            if stored and value not in stored:
                found.append((column, value, difflib.get_close_matches(value, sorted(stored), n=3, cutoff=0.5)))
        return found

    def schema(self) -> tuple[str, bool]:
        """The tables and their columns, with the values of a text column (or examples of them): shown to the
        model before its first step, so it need not guess a name or a stored value; and whether that is the
        whole schema (a large one is cut). ("", False) when the database cannot be read."""
        try:
            with self.connect() as conn:
                tables = {t: self._columns_with_values(conn, t) for t in self.tables(conn)}
        except sqlite3.Error:
            return "", False
        head = "Tables of the database and their columns (a text column's values, or examples of them):"
        for values in (True, False):
            lines = [f"- {t}: " + ", ".join(c if values else c.split(" (")[0] for c in cols)
                     for t, cols in tables.items()]
            text = "\n".join([head, *lines])
            if len(text) <= SCHEMA_CHARS:
                return text, True
        return cap(text, SCHEMA_CHARS - 60) + "\n(describe_table shows a table's columns)", False

    def _columns_with_values(self, conn: sqlite3.Connection, table: str) -> list[str]:
        columns = []
        for row in conn.execute(f'PRAGMA table_info("{table}")'):
            name, kind = row[1], (row[2] or "").upper()
            label = f"{name} {kind}".strip()
            if kind in ("TEXT", "") or "CHAR" in kind:
                found = [str(v) for (v,) in conn.execute(
                    f'SELECT DISTINCT "{name}" FROM (SELECT "{name}" FROM "{table}" LIMIT {SCHEMA_SAMPLE}) '
                    f'WHERE "{name}" IS NOT NULL LIMIT {SCHEMA_VALUES + 1}')]
                shown = ", ".join(repr(cap(v, 30)) for v in (found if len(found) <= SCHEMA_VALUES else found[:2]))
                if found:
                    label += f" ({'one of ' if len(found) <= SCHEMA_VALUES else 'e.g. '}{shown})"
            columns.append(label)
        return columns

    def describe(self, table: str) -> str:
        with self.connect() as conn:
            rows = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            if not rows:
                close = difflib.get_close_matches(table, self.tables(conn), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ToolError(ErrorCode.NOT_FOUND, f"no such table: {table}{hint}",
                                suggestion={"table": close[0]} if close else None)
            return ", ".join(f"{r[1]} {r[2]}" for r in rows)

    def query(self, sql: str) -> str:
        """The rows of one SELECT, header first, with a row count and notes on filters that match nothing."""
        with self.connect() as conn:
            try:
                cursor = conn.execute(sql)
                header = [d[0] for d in cursor.description or []]
                rows = cursor.fetchmany(MAX_ROWS + 1)
                # A row count, since a model counting rows by eye miscounts: the rest is counted, never held.
                total = len(rows) + sum(1 for _ in itertools.islice(cursor, MAX_COUNTED))
            except sqlite3.Error as exc:
                raise self.query_error(conn, exc, sql) from None
            unmatched = self.unmatched_values(conn, sql)
        lines = [" | ".join(header)] + [" | ".join(str(v) for v in row) for row in rows[:MAX_ROWS]]
        if total > MAX_ROWS:
            bound = "at least " if total == MAX_ROWS + 1 + MAX_COUNTED else ""  # counting stopped there
            lines.append(f"... {MAX_ROWS} of {bound}{total} rows shown")
        elif total > 1:
            lines.append(f"({total} rows)")
        return _with_misses(lines, unmatched, sql)

    def query_error(self, conn: sqlite3.Connection, exc: sqlite3.Error, sql: str) -> ToolError:
        if "interrupted" in str(exc):
            return ToolError(ErrorCode.TIMEOUT, f"the query ran past {QUERY_SECONDS:g} s and was stopped")
        error = self.fail(conn, exc, sql)
        if error.code is ErrorCode.PERMISSION:
            # A write sent to the reading tool is a wrong call, not a locked door: the run may still answer
            # with a SELECT, so it must not stop as if nothing could help (PERMISSION does).
            where = "with execute" if self.write else "in this run: the database is open read-only"
            return ToolError(ErrorCode.INVALID_ARGUMENT, f"query only reads, one SELECT ({exc}); the database "
                             f"can be changed only {where}")
        return error

    def execute(self, sql: str) -> str:
        with self.connect(writable=True) as conn:
            try:
                changed = conn.execute(sql).rowcount
            except sqlite3.Error as exc:
                raise self.fail(conn, exc, sql) from None
        return f"{changed} row(s) changed"


def join_key(conn: sqlite3.Connection, left: str, right: str) -> tuple[str, str] | None:
    """(left's column, right's column) that join the two tables: a foreign key one declares on the other; else
    a column both have that is the primary key of exactly one (bed_ref of beds and of harvests); else
    `customer_id` of one against the `id` primary key of `customers` (or `customer`). None when nothing
    joins them, or `id` against `id` (two tables' own numbers say nothing of each other)."""
    def key(table: str) -> str | None:
        pks = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")') if row[5]]
        return pks[0] if len(pks) == 1 else None

    for a, b, flip in ((left, right, False), (right, left, True)):
        for row in conn.execute(f'PRAGMA foreign_key_list("{a}")'):
            if row[2].lower() == b.lower() and row[4]:
                return (row[4], row[3]) if flip else (row[3], row[4])
    shared = {c.lower() for c in Database.columns(conn, left)} & {c.lower() for c in Database.columns(conn, right)}
    keyed = [c for c in shared if (key(left) or "").lower() == c or (key(right) or "").lower() == c]
    if len(keyed) == 1 and not ((key(left) or "").lower() == (key(right) or "").lower() == keyed[0]):
        return keyed[0], keyed[0]
    for a, b, flip in ((left, right, False), (right, left, True)):
        named = {f"{b.lower()}_id", f"{b.lower().rstrip('s')}_id"}
        if key(b) == "id" and (found := [c for c in Database.columns(conn, a) if c.lower() in named]):
            return (key(b) or "id", found[0]) if flip else (found[0], "id")
    return None


CLOSE_NAME = 0.8
"""A wrong name is rewritten into a close one only at least this alike ('nme' and 'name': 0.86), and only when
no other name comes within CLOSE_MARGIN of it: two names alike in letters may differ in meaning ('city_id' and
'city'), and a rewrite the model did not choose answers from the wrong column. A looser match is named in the
error and left to the agent."""
CLOSE_MARGIN = 0.1


_ALIAS = (r"[\"`\]]?(?:\s+(?:AS\s+)?(?!(?:JOIN|INNER|LEFT|RIGHT|CROSS|NATURAL|WHERE|GROUP|ORDER|LIMIT|ON|USING|"
          r"HAVING|UNION)\b)(\w+))?")
"""What may follow a table's name in a query: its closing quote, then its alias (a word no clause starts with)."""
FIRST_TABLE = re.compile(r"\bFROM\s+[\"`\[]?(\w+)" + _ALIAS, re.IGNORECASE)
READ_TABLE = re.compile(TABLES_NAMED.pattern + _ALIAS, re.IGNORECASE)
"""A table a query reads (as TABLES_NAMED finds it), and its alias if it has one."""


def _qualified(sql: str, column: str) -> str | None:
    """`sql` with every bare use of an ambiguous `column` (outside quotes) qualified by the first table it reads
    from (or that table's alias): in a join on that column both sides are equal, and any one reading is better
    than none. None when there is no FROM to take a table from."""
    first = FIRST_TABLE.search(sql)
    if first is None:
        return None
    owner = first.group(2) or first.group(1)
    parts = re.split(r"('(?:[^']|'')*')", sql)  # quoted text stays as it is
    bare = re.compile(rf"(?<![\w.\"`]){re.escape(column)}\b(?!\s*\()", re.IGNORECASE)
    return "".join(part if i % 2 else bare.sub(f"{owner}.{column}", part) for i, part in enumerate(parts))


def _one_close_match(wrong: str, pool: list[str]) -> str | None:
    """The one name of `pool` close enough to `wrong` to rewrite it into (see CLOSE_NAME), or None."""
    scored = sorted(((difflib.SequenceMatcher(None, wrong.lower(), name.lower()).ratio(), name) for name in pool),
                    reverse=True)
    if not scored or scored[0][0] < CLOSE_NAME:
        return None
    if len(scored) > 1 and scored[1][0] >= scored[0][0] - CLOSE_MARGIN:
        return None
    return scored[0][1]


def _with_misses(lines: list[str], unmatched: list[tuple[str, str, list[str]]], sql: str) -> str:
    """A query's output with a note per filter that matched nothing; a close enough stored value is offered
    as a repair (a NOT_FOUND with the fixed query, applied by rule)."""
    misses = [f"no row has {column} = {value!r}"
              + (f"; closest stored values: {', '.join(repr(c) for c in close)}" if close else "")
              for column, value, close in unmatched]
    repairs = {(column, value): close[0] for column, value, close in unmatched
               if close and difflib.SequenceMatcher(None, value, close[0]).ratio() >= VALUE_REPAIR}
    if repairs:
        fixed = EQUALS_TEXT.sub(lambda m: f"{m[1]} = '{repairs[(m[1], m[2])]}'" if (m[1], m[2]) in repairs
                                else m[0], sql)
        did_you_mean = ", ".join(repr(v) for v in repairs.values())
        raise ToolError(ErrorCode.NOT_FOUND, f"{'; '.join(misses)} (did you mean {did_you_mean}?); the query "
                        f"gave: {' / '.join(lines[:3])}", suggestion={"sql": fixed})
    return "\n".join(lines + [f"note: {miss}" for miss in misses])


def sql_tools(path: str | Path, *, write: bool = False, discovery: bool | None = None) -> list[Tool]:
    """Tools over the SQLite file at `path`. `query` only reads: a statement that would change the file is
    an INVALID_ARGUMENT (a wrong call, which the agent can follow with a SELECT). With write=True, `execute`
    is a side-effecting tool; without it nothing can change the file, which is opened read-only.

    Every tool's context is the schema (the tables, their columns, a text column's values), which the model
    is shown before its first step. `list_tables` and `describe_table` are given only when that schema was
    too large to show whole (`discovery` None), or when asked for (True): with the schema in view they tell
    the model nothing new, and a small model calls them in a loop instead of querying."""
    db_path = Path(path)
    if not db_path.is_file():
        raise ConfigError(f"database not found: {db_path}", hint="give an existing SQLite file with --db")
    db = Database(db_path, write)

    @tool
    def list_tables() -> str:
        """List the tables in the database."""
        with db.connect() as conn:
            return ", ".join(db.tables(conn))

    @tool
    def describe_table(table: str) -> str:
        """Show a table's columns and their types."""
        return db.describe(table)

    @tool
    def query(sql: str) -> str:
        """Run one SQL SELECT and return the rows, header first."""
        return db.query(sql)

    schema, whole = db.schema()
    include = (not whole) if discovery is None else discovery
    toolset = [list_tables, describe_table, query] if include else [query]
    if write:
        @tool(side_effect=True)
        def execute(sql: str) -> str:
            """Run one SQL statement that changes the database; returns the number of rows changed."""
            return db.execute(sql)

        toolset.append(execute)
    return [replace(t, context=schema) for t in toolset]
