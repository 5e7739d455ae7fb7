"""Your own tools for `reflexa react --tools`: three functions over the example shop database.

reflexa react "What does the tent cost?" --tools examples/tools/shop_tools.py

The database is shop.sqlite in the current folder (make it with examples/shop/make_shop.py), or $SHOP_DB.
"""

from __future__ import annotations

import os
import sqlite3

from reflexa import tool


def _db() -> sqlite3.Connection:
    return sqlite3.connect(os.environ.get("SHOP_DB", "shop.sqlite"))


@tool
def product_price(name: str) -> str:
    """The price of a product, in EUR, by its name."""
    with _db() as db:
        row = db.execute("SELECT price FROM products WHERE name = ?", (name.strip().lower(),)).fetchone()
    if row is None:
        raise LookupError(f"no product named {name!r}")
    return f"{row[0]:g}"


@tool
def order_status(order_id: int) -> str:
    """The status of an order, by its id."""
    with _db() as db:
        row = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise LookupError(f"no order {order_id}")
    return str(row[0])


@tool(side_effect=True)
def cancel_order(order_id: int) -> str:
    """Cancel an order, by its id. Changes the database."""
    with _db() as db:
        changed = db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (order_id,)).rowcount
    if not changed:
        raise LookupError(f"no order {order_id}")
    return f"order {order_id} cancelled"
