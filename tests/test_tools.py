import time

import pytest
from pydantic import BaseModel

from reflexa.errors import ConfigError
from reflexa.tools import ToolError, ToolRegistry, ToolSession, sql_tools, tool
from reflexa.trace.store import MemoryStore
from reflexa.types import Control, ErrorCode


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Refund(BaseModel):
    order_id: int
    amount: float


def test_typed_function_becomes_a_validated_tool():
    registry = ToolSession(ToolRegistry([add]))
    assert registry.call("add", {"a": 2, "b": 3}).output == "5"
    bad = registry.call("add", {"a": "two", "b": 3})
    assert not bad.ok and bad.code is ErrorCode.SCHEMA


def test_schema_error_offers_a_close_match_rename():
    bad = ToolSession(ToolRegistry([add])).call("add", {"a": 1, "bb": 2})
    assert bad.code is ErrorCode.SCHEMA and bad.suggestion == {"a": 1, "b": 2}


def test_bad_call_never_runs_the_tool():
    calls = []

    @tool
    def record(x: int) -> str:
        calls.append(x)
        return "ok"

    assert ToolSession(ToolRegistry([record])).call("record", {"x": "nope"}).code is ErrorCode.SCHEMA
    assert calls == []


def test_pydantic_model_tool():
    @tool(side_effect=True)
    def refund(request: Refund) -> str:
        """Refund an order."""
        return f"refunded {request.amount} on {request.order_id}"

    registry = ToolSession(ToolRegistry([refund]))
    assert registry.call("refund", {"order_id": 7, "amount": 5}).output == "refunded 5.0 on 7"


def test_timeout_and_exception_codes():
    @tool(timeout=0.2)
    def slow() -> str:
        time.sleep(2)
        return "late"

    @tool
    def missing(key: str) -> str:
        return {}[key]

    @tool
    def denied() -> str:
        raise PermissionError("no")

    @tool
    def explicit() -> str:
        raise ToolError(ErrorCode.NOT_FOUND, "no order 9", fatal=True)

    registry = ToolSession(ToolRegistry([slow, missing, denied, explicit]))
    started = time.monotonic()
    assert registry.call("slow", {}).code is ErrorCode.TIMEOUT
    assert time.monotonic() - started < 1.0
    assert registry.call("missing", {"key": "x"}).code is ErrorCode.NOT_FOUND
    assert registry.call("denied", {}).code is ErrorCode.PERMISSION
    fatal = registry.call("explicit", {})
    assert fatal.code is ErrorCode.NOT_FOUND and fatal.fatal
    assert registry.call("nope", {}).code is ErrorCode.SCHEMA  # an unknown tool name is a schema error


def test_output_is_capped_shows_both_ends_and_pages_the_middle():
    @tool(max_chars=100)
    def big() -> str:
        return "h" * 75 + "m" * 200 + "t" * 25  # 300 characters: a head, a middle, the result last

    registry = ToolSession(ToolRegistry([big]))
    first = registry.call("big", {})
    assert first.truncated and "truncated" in first.shown()
    assert first.output.startswith("h" * 75) and first.output.endswith("\n" + "t" * 25)
    assert "mm" not in first.output and "200 characters cut" in first.output
    second = registry.page("big", 1)
    assert second is not None and second.output == "m" * 100 and second.truncated
    third = registry.page("big", 2)
    assert third.output == "m" * 100 and not third.truncated
    assert registry.page("big", 3) is None and registry.page("big", 0) is None


def test_empty_result_legal_or_not():
    @tool(empty_ok=False)
    def lookup() -> str:
        return ""

    @tool
    def search() -> list:
        return []

    registry = ToolSession(ToolRegistry([lookup, search]))
    assert registry.call("lookup", {}).code is ErrorCode.EMPTY
    assert registry.call("search", {}).ok


def test_blocks_are_enforced():
    registry = ToolSession(ToolRegistry([add]))
    registry.blocks.apply(Control("block_value", "add", "a", "1"))
    assert registry.call("add", {"a": 1, "b": 1}).code is ErrorCode.BLOCKED
    assert registry.call("add", {"a": 2, "b": 1}).ok
    registry.blocks.apply(Control("block_tool", "add"))
    assert registry.call("add", {"a": 2, "b": 1}).code is ErrorCode.BLOCKED


def test_side_effects_are_idempotent_by_key():
    effects = []

    @tool(side_effect=True)
    def charge(amount: int) -> str:
        effects.append(amount)
        return f"charged {amount}"

    store = MemoryStore()
    registry = ToolSession(ToolRegistry([charge]), store, "run1")
    first = registry.call("charge", {"amount": 5}, step=1)
    again = registry.call("charge", {"amount": 5}, step=1)
    assert effects == [5] and again.replayed and again.output == first.output
    other = registry.call("charge", {"amount": 6}, step=1)  # other arguments at the same step: a new call
    assert effects == [5, 6] and not other.replayed


def test_one_registry_serves_runs_with_their_own_blocks():
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    registry = ToolRegistry([add])
    first = ToolSession(registry)
    first.blocks.apply(Control("block_tool", "add"))
    assert first.call("add", {"a": 1, "b": 1}).code is ErrorCode.BLOCKED
    assert ToolSession(registry).call("add", {"a": 1, "b": 1}).ok  # run 2 is not bound by run 1's blocks


def test_reserved_and_unknown_tool_names():
    @tool(name="final_answer")
    def sneaky() -> str:
        return "x"

    with pytest.raises(ConfigError):
        ToolRegistry([sneaky])
    assert ToolSession(ToolRegistry([])).call("(page)", {}).code is ErrorCode.SCHEMA


def test_sql_tools_read_only_by_default(shop, monkeypatch):
    from reflexa.tools import sql as sql_module

    registry = ToolSession(ToolRegistry(sql_tools(shop, discovery=True)))
    assert "customers" in registry.call("list_tables", {}).output
    assert "name TEXT" in registry.call("describe_table", {"table": "customers"}).output
    rows = registry.call("query", {"sql": "SELECT count(*) AS n FROM orders"})
    assert rows.output.splitlines() == ["n", "400"]  # one row: nothing to count
    many = registry.call("query", {"sql": "SELECT id FROM orders WHERE id <= 3"}).output.splitlines()
    assert many == ["id", "1", "2", "3", "(3 rows)"]  # counted, since a model counting lines miscounts
    cut = registry.call("query", {"sql": "SELECT id FROM orders"}).output.splitlines()
    assert len(cut) == 1 + 200 + 1 and cut[-1] == "... 200 of 400 rows shown"
    monkeypatch.setattr(sql_module, "MAX_COUNTED", 50)  # a huge result: counting stops, and says so
    huge = registry.call("query", {"sql": "SELECT id FROM orders"}).output
    assert huge.endswith("... 200 of at least 251 rows shown")
    # A write sent to the reading tool is a wrong call the agent can follow with a SELECT, not a stop.
    write = registry.call("query", {"sql": "DELETE FROM orders"})
    assert write.code is ErrorCode.INVALID_ARGUMENT and "open read-only" in write.message
    alter = ToolSession(ToolRegistry(sql_tools(shop, write=True))).call("query", {"sql": "ALTER TABLE orders ADD x"})
    assert alter.code is ErrorCode.INVALID_ARGUMENT and "only with execute" in alter.message
    assert registry.call("query", {"sql": "SELECT count(*) AS n FROM orders"}).output.splitlines() == ["n", "400"]


def test_sql_unknown_column_suggests_a_close_match(shop):
    registry = ToolSession(ToolRegistry(sql_tools(shop, discovery=True)))
    wrong = registry.call("query", {"sql": "SELECT nme FROM customers LIMIT 1"})
    assert wrong.code is ErrorCode.NOT_FOUND and "did you mean name" in wrong.message
    assert wrong.suggestion == {"sql": "SELECT name FROM customers LIMIT 1"}
    table = registry.call("describe_table", {"table": "custmers"})
    assert table.code is ErrorCode.NOT_FOUND and table.suggestion == {"table": "customers"}


def test_sql_read_only_creates_no_file_and_offers_no_repair_that_changes_nothing(shop, tmp_path):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    attached = session.call("query", {"sql": f"ATTACH '{tmp_path / 'new.db'}' AS x"})
    assert not attached.ok and not (tmp_path / "new.db").exists()  # ATTACH made the file, read-only or not
    # A column of one other table, in a query that reads one table and names nothing else: that table is
    # the query's one reading, so the rewrite reads it (the close match, the same name, would loop).
    moved = session.call("query", {"sql": "SELECT city FROM products"})
    assert moved.code is ErrorCode.NOT_FOUND and moved.suggestion == {"sql": "SELECT city FROM customers"}
    assert "city is a column of customers" in moved.message
    # Naming a column the other table lacks, the query has no one reading: the table is named, not rewritten.
    mixed = session.call("query", {"sql": "SELECT city, price FROM products"})
    assert mixed.suggestion is None and "city is a column of customers" in mixed.message


def test_a_column_of_another_table_joins_it_on_their_key(shop, tmp_path):
    """What an error lists, used: the column is in one other table, the two are joined by a declared foreign
    key, a shared key column, or `customer_id` against `customers.id`, and never `id` against `id`."""
    import sqlite3

    session = ToolSession(ToolRegistry(sql_tools(shop)))
    declared = session.call("query", {"sql": "SELECT count(*) FROM orders WHERE city = 'Lisbon'"})
    assert declared.suggestion == {"sql": "SELECT count(*) FROM orders JOIN customers ON orders.customer_id = "
                                          "customers.id WHERE city = 'Lisbon'"}
    db = tmp_path / "beds.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE bed (bed_ref TEXT PRIMARY KEY, zone TEXT)")
        conn.execute("CREATE TABLE crop (crop_no INTEGER PRIMARY KEY, bed_ref TEXT, kg REAL)")
        conn.execute("CREATE TABLE pot (id INTEGER PRIMARY KEY, label TEXT)")
        conn.execute("CREATE TABLE plant (id INTEGER PRIMARY KEY, pot_id INTEGER, height REAL)")
        conn.execute("CREATE TABLE tray (id INTEGER PRIMARY KEY, colour TEXT)")
        conn.executemany("INSERT INTO bed VALUES (?, ?)", [("B1", "north"), ("B2", "south")])
        conn.executemany("INSERT INTO crop VALUES (?, ?, ?)", [(1, "B1", 2.5), (2, "B2", 4.0), (3, "B1", 1.0)])
    conn.close()
    session = ToolSession(ToolRegistry(sql_tools(db)))
    shared = session.call("query", {"sql": "SELECT sum(kg) FROM crop WHERE zone = 'north'"})
    assert shared.suggestion == {"sql": "SELECT sum(kg) FROM crop JOIN bed ON crop.bed_ref = bed.bed_ref WHERE "
                                        "zone = 'north'"}
    assert session.call("query", shared.suggestion).output.splitlines() == ["sum(kg)", "3.5"]
    named = session.call("query", {"sql": "SELECT max(height) FROM plant WHERE label = 'x'"})
    assert named.suggestion == {"sql": "SELECT max(height) FROM plant JOIN pot ON plant.pot_id = pot.id WHERE "
                                       "label = 'x'"}
    # tray and pot share only their own `id`s: no join; colour is all the query names, so it reads tray.
    unrelated = session.call("query", {"sql": "SELECT count(*) FROM pot WHERE colour = 'red'"})
    assert unrelated.suggestion == {"sql": "SELECT count(*) FROM tray WHERE colour = 'red'"}


def test_a_column_behind_a_qualifier_that_lacks_it_is_requalified_by_its_one_owner(tmp_path):
    """hv.kg_yield (no alias hv) and b.kg (b is bed, which has no kg) both mean the one table the query reads
    that has the column: repaired by rule, as the query names that table. A column two read tables have is
    named with both, unrepaired."""
    import sqlite3

    db = tmp_path / "beds.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE bed (bed_ref TEXT PRIMARY KEY, zone TEXT)")
        conn.execute("CREATE TABLE crop (crop_no INTEGER PRIMARY KEY, bed_ref TEXT, kg REAL, zone TEXT)")
        conn.executemany("INSERT INTO bed VALUES (?, ?)", [("B1", "north"), ("B2", "south")])
        conn.executemany("INSERT INTO crop VALUES (?, ?, ?, ?)", [(1, "B1", 2.5, "n"), (2, "B2", 4.0, "s")])
    conn.close()
    session = ToolSession(ToolRegistry(sql_tools(db)))
    unknown = session.call("query", {"sql": "SELECT sum(hv.kg) FROM bed JOIN crop ON bed.bed_ref = crop.bed_ref "
                                            "WHERE bed.zone = 'north'"})
    assert "no table or alias hv of this query has kg: write crop.kg" in unknown.message
    assert session.call("query", unknown.suggestion).output.splitlines() == ["sum(crop.kg)", "2.5"]
    wrong = session.call("query", {"sql": "SELECT sum(b.kg) FROM bed b JOIN crop c ON b.bed_ref = c.bed_ref"})
    assert wrong.suggestion == {"sql": "SELECT sum(c.kg) FROM bed b JOIN crop c ON b.bed_ref = c.bed_ref"}
    both = session.call("query", {"sql": "SELECT x.zone FROM bed b JOIN crop c ON b.bed_ref = c.bed_ref"})
    assert "write b.zone or c.zone" in both.message and both.suggestion is None


def test_an_ambiguous_column_is_qualified_by_the_first_table_the_query_reads(shop):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    sql = ("SELECT id, count(*) FROM orders JOIN refunds ON refunds.order_id = orders.id GROUP BY id "
           "ORDER BY 2 DESC LIMIT 1")
    ambiguous = session.call("query", {"sql": sql})
    assert "qualify it with its table: orders.id or refunds.id" in ambiguous.message
    qualified = sql.replace("SELECT id", "SELECT orders.id").replace("BY id", "BY orders.id")
    assert ambiguous.suggestion == {"sql": qualified}
    assert session.call("query", ambiguous.suggestion).ok
    aliased = session.call("query", {"sql": "SELECT o.id FROM orders o JOIN refunds r ON r.order_id = o.id "
                                            "WHERE id = 'x'"})
    assert aliased.suggestion == {"sql": "SELECT o.id FROM orders o JOIN refunds r ON r.order_id = o.id WHERE "
                                         "o.id = 'x'"}


def test_the_discovery_tools_are_given_only_when_the_schema_is_too_large_to_show(shop, tmp_path):
    import sqlite3

    assert [t.name for t in sql_tools(shop)] == ["query"]  # the schema, in every tool's context, says it all
    wide = tmp_path / "wide.sqlite"
    with sqlite3.connect(wide) as conn:
        for n in range(60):
            conn.execute(f"CREATE TABLE t{n} (" + ", ".join(f"column_{i} TEXT" for i in range(12)) + ")")
    conn.close()
    assert [t.name for t in sql_tools(wide)] == ["list_tables", "describe_table", "query"]
    assert [t.name for t in sql_tools(shop, write=True)] == ["query", "execute"]


def test_a_database_path_with_uri_characters_is_opened_as_it_is(shop, tmp_path):
    import shutil

    odd = tmp_path / "proj#2" / "100%41"
    odd.mkdir(parents=True)
    shutil.copy(shop, odd / "shop.sqlite")
    session = ToolSession(ToolRegistry(sql_tools(odd / "shop.sqlite", discovery=True)))
    assert "customers" in session.call("list_tables", {}).output and not (tmp_path / "proj").exists()


def test_sql_names_what_exists_when_nothing_is_close(shop):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    wrong = session.call("query", {"sql": "SELECT price FROM tent"})
    assert wrong.code is ErrorCode.NOT_FOUND and "tables: customers, order_items" in wrong.message
    # A name that is really a stored value: where it is stored, as stored (any case matches).
    assert wrong.message.endswith("'tent' is a value of products.name: filter on it, WHERE name = 'tent'")
    # A plain select from it has one reading, offered as the repair the classifier applies by rule.
    assert wrong.suggestion == {"sql": """SELECT price FROM "products" WHERE "name" = 'tent'"""}
    assert session.call("query", wrong.suggestion).output.splitlines() == ["price", "210.0"]
    filtered = session.call("query", {"sql": "SELECT price FROM tent WHERE price > 1"})
    assert "is a value of products.name" in filtered.message and filtered.suggestion is None  # more than one reading
    column = session.call("query", {"sql": "SELECT count(*) FROM orders WHERE CANCELLED = 1"})
    assert "'CANCELLED' is a value of orders.status: filter on it, WHERE status = 'cancelled'" in column.message
    assert column.suggestion is None  # a filter already: which rows it meant is a guess
    # A stored value selected as if it were a column of the table that holds it: its rows, by rule.
    selected = session.call("query", {"sql": "SELECT cancelled FROM orders"})
    assert selected.suggestion == {"sql": """SELECT * FROM "orders" WHERE "status" = 'cancelled'"""}
    assert session.call("query", selected.suggestion).output.endswith("| cancelled\n(41 rows)")
    elsewhere = session.call("query", {"sql": "SELECT cancelled FROM customers"})
    assert "is a value of orders.status" in elsewhere.message and elsewhere.suggestion is None
    # After a failed write too: the scan runs on a read-only connection of its own, under the query timeout.
    written = ToolSession(ToolRegistry(sql_tools(shop, write=True))).call("execute", {"sql": "DELETE FROM tent"})
    assert "'tent' is a value of products.name" in written.message
    nothing = session.call("query", {"sql": "SELECT colour FROM products"})
    # The columns of the table queried, not of the whole database.
    assert "columns of products: category, id, name, price)" in nothing.message
    assert "amount" not in nothing.message and "is a value of" not in nothing.message
    # A query that names no table that exists lists every column.
    joined = session.call("query", {"sql": "SELECT zzz FROM orders o JOIN customers c ON c.id = o.customer_id"})
    assert "columns of customers, orders: city, customer_id, id, joined, name" in joined.message


def test_sql_aggregate_misuse_says_what_it_needs(shop):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    wrong = session.call("query", {"sql": "SELECT city FROM customers ORDER BY count(*) DESC LIMIT 1"})
    assert wrong.code is ErrorCode.TOOL_ERROR and "needs GROUP BY" in wrong.message


def test_sql_text_filter_that_matches_nothing_names_the_closest_values(shop):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    loose = session.call("query", {"sql": "SELECT count(*) FROM customers WHERE city = 'Kyo'"})
    note = "note: no row has city = 'Kyo'; closest stored values: 'Kyoto', 'Lyon'"
    assert loose.ok and loose.output.splitlines() == ["count(*)", "0", note]  # too loose to repair: a note
    right = session.call("query", {"sql": "SELECT count(*) FROM customers WHERE city = 'Lisbon'"})
    assert "note" not in right.output


def test_sql_misspelt_filter_value_is_offered_its_repair(shop):
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    misspelt = session.call("query", {"sql": "SELECT count(*) FROM customers WHERE city = 'Lisboa' AND id > 0"})
    assert misspelt.code is ErrorCode.NOT_FOUND and "did you mean 'Lisbon'?" in misspelt.message
    assert "count(*) / 0" in misspelt.message  # what the query gave is still said
    assert misspelt.suggestion == {"sql": "SELECT count(*) FROM customers WHERE city = 'Lisbon' AND id > 0"}


def test_sql_missing_database_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        sql_tools(tmp_path / "none.sqlite")


def test_enum_and_model_arguments_reach_the_tool_as_themselves_and_fit_the_action_schema():
    """An Enum or a nested model argument: its $defs move to the action schema's root (a reply was checked
    against a reference to nowhere), and the tool gets the model, not a dict."""
    import enum

    import jsonschema
    from pydantic import BaseModel

    from reflexa.loops import react_prompts

    class Status(enum.Enum):
        OPEN = "open"
        DONE = "done"

    class Point(BaseModel):
        x: float
        y: float

    seen = []

    @tool
    def mark(status: Status, at: Point) -> str:
        """Mark a point."""
        seen.append((status, at))
        return f"{status.value} at {at.x},{at.y}"

    registry = ToolRegistry([mark])
    schema = react_prompts.action_schema(registry)
    reply = {"action": {"thought": "t", "tool": "mark", "args": {"status": "open", "at": {"x": 1, "y": 2}}}}
    jsonschema.validate(reply, schema)  # raised PointerToNowhere before
    observation = ToolSession(registry).call("mark", {"status": "open", "at": {"x": 1, "y": 2}}, step=1)
    assert observation.ok and seen == [(Status.OPEN, Point(x=1, y=2))]


def test_a_blocked_value_and_an_effect_key_see_the_arguments_as_validated():
    """17.0, "17 " and "017" are the int 17: a block on order 17 holds for each, and one charge at a step is
    one effect however its amount is spelled (they were three)."""
    charges = []

    @tool(side_effect=True)
    def charge(order_id: int, amount: int = 5) -> str:
        """Charge an order."""
        charges.append(order_id)
        return f"charged {order_id}"

    session = ToolSession(ToolRegistry([charge]), MemoryStore(), "run-1")
    session.blocks.apply(Control("block_value", "charge", arg="order_id", value="17"))
    for spelling in (17.0, "17 ", "017"):
        assert session.call("charge", {"order_id": spelling}, step=1).code is ErrorCode.BLOCKED
    for spelling in (5, "5", 5.0):
        session.call("charge", {"order_id": spelling}, step=2)
    assert charges == [5]


def test_two_tools_of_one_name_are_refused():
    @tool(name="lookup")
    def first(key: str) -> str:
        """One."""
        return key

    @tool(name="lookup")
    def second(key: str) -> str:
        """Two."""
        return key

    with pytest.raises(ConfigError, match="two tools are named 'lookup'"):
        ToolRegistry([first, second])


def test_a_runaway_read_only_query_is_stopped_by_sqlite(shop, monkeypatch):
    """Not just abandoned at the tool's timeout (a thread cannot be killed, and went on burning a core)."""
    import threading

    monkeypatch.setattr("reflexa.tools.sql.QUERY_SECONDS", 0.5)
    before = threading.active_count()
    session = ToolSession(ToolRegistry(sql_tools(shop)))
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    started = time.monotonic()
    stopped = session.call("query", {"sql": endless})
    assert stopped.code is ErrorCode.TIMEOUT and "was stopped" in stopped.message
    assert time.monotonic() - started < 5 and threading.active_count() <= before


def test_the_shop_generator_never_replaces_a_file_that_is_not_its_database(tmp_path):
    """examples/shop/make_shop.py replaces the database it made before, but a bad argument (a typo'd file
    name, a flag it does not know) is refused, with the file left as it was and no file created."""
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    script = [sys.executable, str(Path(__file__).parent.parent / "examples" / "shop" / "make_shop.py")]
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    refused = subprocess.run([*script, str(notes)], capture_output=True, text=True)
    assert refused.returncode == 1 and "not a shop database" in refused.stderr
    assert notes.read_text() == "keep me"
    other = tmp_path / "trace.db"  # an SQLite file, but not one the script made
    sqlite3.connect(other).execute("CREATE TABLE runs (id)").connection.commit()
    assert subprocess.run([*script, str(other)], capture_output=True, text=True).returncode == 1
    assert other.stat().st_size > 0
    shown = subprocess.run([*script, "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.returncode == 0 and "usage" in shown.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "trace.db"]
    for _ in range(2):  # its own database is replaced, the second time too
        made = subprocess.run([*script, str(tmp_path / "shop.sqlite")], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr


@pytest.mark.parametrize("raised,said", [(SystemExit(0), "the tool raised SystemExit: 0"),
                                         (GeneratorExit(), "the tool raised GeneratorExit"),
                                         (BaseException("bare"), "the tool raised BaseException: bare"),
                                         (KeyboardInterrupt(), "the tool raised KeyboardInterrupt")])
def test_whatever_a_tool_raises_is_a_failure_of_that_tool_not_an_exit(raised, said):
    """A tool's SystemExit(0) once ended the CLI with status 0 on an ERROR run; GeneratorExit and a bare
    BaseException printed a traceback and left the run running."""
    @tool
    def lookup() -> str:
        """Look it up."""
        raise raised

    observation = ToolSession(ToolRegistry([lookup])).call("lookup", {})
    assert not observation.ok and observation.code is ErrorCode.TOOL_ERROR and observation.message == said


def test_an_exception_whose_str_raises_is_named_by_its_type():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    @tool
    def lookup() -> str:
        """Look it up."""
        raise Broken

    assert ToolSession(ToolRegistry([lookup])).call("lookup", {}).message == "Broken"


def test_a_tool_that_raises_system_exit_leaves_the_cli_s_exit_code_the_run_s(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "exits.py").write_text('from reflexa import tool\n\n\n@tool\ndef leave() -> str:\n'
                                       '    """Leave."""\n    raise SystemExit(0)\n')
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"replies": [{"action": {"thought": "t", "tool": "leave", "args": {}}},
                                               {"action": {"thought": "u", "tool": "final_answer",
                                                           "args": {"answer": "x"}}}]}))
    done = subprocess.run([sys.executable, "-m", "reflexa.cli", "react", "q", "--tools", "exits.py", "-m",
                           f"scripted:{replies}", "--validate", "test \"$REFLEXA_ANSWER\" = y", "--max-steps", "2",
                           "--no-reflect", "--json", "--trace", str(tmp_path / "t.db")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    result = json.loads(done.stdout)
    assert done.returncode == 3 and result["stop_reason"] == "MAX_ITERATIONS", done.stderr
    assert "Traceback" not in done.stderr
