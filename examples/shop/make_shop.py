"""Generate a small, deterministic shop database for `reflexa react` demos, tests and benchmarks.

python examples/shop/make_shop.py [shop.sqlite]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from datetime import date, timedelta
from pathlib import Path

FIRST = [
    "Ada",
    "Ben",
    "Chloe",
    "Dev",
    "Elif",
    "Femi",
    "Grace",
    "Hugo",
    "Iris",
    "Jonas",
    "Kemal",
    "Lena",
    "Mateo",
    "Nia",
    "Oskar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
]
LAST = ["Novak", "Okafor", "Larsen", "Moreau", "Tanaka", "Silva", "Weber", "Kaur", "Rossi", "Haddad"]
CITIES = ["Lisbon", "Oslo", "Lagos", "Osaka", "Lyon", "Porto", "Bergen", "Kyoto"]
PRODUCTS = [
    ("kettle", "kitchen", 39.0),
    ("toaster", "kitchen", 29.5),
    ("blender", "kitchen", 74.0),
    ("desk lamp", "office", 22.0),
    ("office chair", "office", 149.0),
    ("notebook", "office", 4.5),
    ("tent", "outdoor", 210.0),
    ("sleeping bag", "outdoor", 89.0),
    ("headlamp", "outdoor", 19.0),
    ("yoga mat", "sport", 25.0),
    ("dumbbells", "sport", 55.0),
    ("running shoes", "sport", 120.0),
]
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, joined TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     ordered_at TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id),
                          product_id INTEGER NOT NULL REFERENCES products(id),
                          quantity INTEGER NOT NULL, unit_price REAL NOT NULL);
CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
                      amount REAL NOT NULL, refunded_at TEXT NOT NULL);
"""


def _is_shop(path: Path) -> bool:
    """Whether `path` is an SQLite file holding the shop's tables (what `build` made before)."""
    try:
        with path.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return False
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (OSError, sqlite3.Error):
        return False
    return {"customers", "orders", "refunds"} <= tables


def build(path: str | Path, *, seed: int = 7, customers: int = 40, orders: int = 400) -> Path:
    """Write the database to `path` (replacing a shop database there, never any other file) and return the
    path."""
    path = Path(path)
    if path.exists() and not _is_shop(path):
        raise SystemExit(f"{path} exists and is not a shop database: not replacing it")
    path.unlink(missing_ok=True)
    rng = random.Random(seed)
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    names = rng.sample([f"{first} {last}" for first in FIRST for last in LAST], customers)
    for i, name in enumerate(names, 1):
        joined = date(2022, 1, 1) + timedelta(days=rng.randrange(0, 900))
        db.execute("INSERT INTO customers VALUES (?, ?, ?, ?)", (i, name, rng.choice(CITIES), joined.isoformat()))
    for i, (name, category, price) in enumerate(PRODUCTS, 1):
        db.execute("INSERT INTO products VALUES (?, ?, ?, ?)", (i, name, category, price))
    refund_id = 0
    for order_id in range(1, orders + 1):
        day = date(2023, 1, 1) + timedelta(days=rng.randrange(0, 730))
        status = rng.choices(["delivered", "shipped", "cancelled"], [0.8, 0.1, 0.1])[0]
        db.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?)",
            (order_id, rng.randrange(1, customers + 1), day.isoformat(), status),
        )
        total = 0.0
        for product_id in rng.sample(range(1, len(PRODUCTS) + 1), rng.randrange(1, 4)):
            quantity = rng.randrange(1, 4)
            price = PRODUCTS[product_id - 1][2]
            total += quantity * price
            db.execute("INSERT INTO order_items VALUES (?, ?, ?, ?)", (order_id, product_id, quantity, price))
        if status == "delivered" and rng.random() < 0.05:
            refund_id += 1
            db.execute(
                "INSERT INTO refunds VALUES (?, ?, ?, ?)",
                (
                    refund_id,
                    order_id,
                    round(total * rng.choice([0.5, 1.0]), 2),
                    (day + timedelta(days=rng.randrange(3, 30))).isoformat(),
                ),
            )
    db.commit()
    db.close()
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="shop.sqlite", help="where the database goes (default: %(default)s)")
    print(build(parser.parse_args().path))
