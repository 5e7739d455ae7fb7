"""A craft brewery's tanks, batches and tasting panels (a tuning domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "tnk": "CREATE TABLE tnk (tnk_cd TEXT PRIMARY KEY, hall_nm TEXT, cap_hl REAL, fitted_yr INTEGER)",
    "bch": "CREATE TABLE bch (lot_no TEXT PRIMARY KEY, vessel TEXT, sty_cd TEXT, brewed_dt TEXT, vol_hl REAL, "
           "abv_x10 INTEGER)",
    "tst": "CREATE TABLE tst (tst_id INTEGER PRIMARY KEY, lot_ref TEXT, panel_lbl TEXT, pts INTEGER, tst_dt TEXT)",
}
TANKS = [("FV-1", "Kettle Hall", 20.0, 2011), ("FV-2", "Kettle Hall", 20.0, 2011), ("FV-3", "Kettle Hall", 35.0, 2016),
         ("FV-4", "Cellar Row", 35.0, 2016), ("FV-5", "Cellar Row", 50.0, 2019), ("FV-6", "Cellar Row", 50.0, 2019),
         ("CT-7", "Annex", 12.5, 2022), ("CT-8", "Annex", 12.5, 2023)]
STYLES = ["IPA", "STT", "PLS", "SSN", "WIT"]
PANELS = ["Panel North", "Panel Quay", "Staff"]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    batches = []
    for n in range(1, 27):
        tank = rng.choice(TANKS)
        batches.append((f"L{2400 + 7 * n}", tank[0], rng.choice(STYLES),
                        f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d}",
                        round(rng.uniform(0.55, 0.98) * tank[2], 1), rng.randint(38, 92)))
    tastings = []
    for n in range(1, 121):
        lot = rng.choice(batches)[0]
        tastings.append((n, lot, rng.choice(PANELS), rng.randint(52, 97),
                         f"2026-{rng.randint(2, 11):02d}-{rng.randint(1, 28):02d}"))
    return {"tnk": TANKS, "bch": batches, "tst": tastings}


API = '''"""The brewery's cellar API. Tanks have codes such as FV-3 and stand in a hall; batches are lots with numbers
such as L2435, brewed in one tank in a style (IPA, STT stout, PLS pilsner, SSN saison, WIT witbier), their
strength kept as ten times the ABV; tasting panels score a lot out of 100."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def lots_of_style(style: str) -> str:
    """The lots brewed in a style, by its code (e.g. IPA), with their tanks and volumes."""
    found = _rows("SELECT lot_no, vessel, vol_hl FROM bch WHERE sty_cd = ? ORDER BY lot_no", style.strip().upper())
    if not found:
        raise LookupError(f"no lot of style {style}")
    return "\\n".join(f"{lot} in {tank}, {volume} hl" for lot, tank, volume in found)


@tool
def lot(lot_no: str) -> str:
    """A lot's tank, style, brew date, volume in hectolitres and ABV, by its number."""
    found = _rows("SELECT lot_no, vessel, sty_cd, brewed_dt, vol_hl, abv_x10 FROM bch WHERE lot_no = ?",
                  lot_no.strip().upper())
    if not found:
        raise KeyError(lot_no)
    no, tank, style, day, volume, abv = found[0]
    return f"{no}: {style} brewed {day} in {tank}, {volume} hl at {abv / 10:.1f}% ABV"


@tool
def tastings_of(lot_no: str) -> str:
    """Every tasting of a lot: date, panel and points."""
    found = _rows("SELECT tst_dt, panel_lbl, pts FROM tst WHERE lot_ref = ? ORDER BY tst_dt", lot_no.strip().upper())
    lines = [f"{day}: {panel}, {points} points" for day, panel, points in found]
    return "\\n".join(lines) + f"\\n({len(found)} tastings)"


@tool
def tank(code: str) -> str:
    """A tank's hall, capacity in hectolitres and year fitted, by its code."""
    found = _rows("SELECT tnk_cd, hall_nm, cap_hl, fitted_yr FROM tnk WHERE tnk_cd = ?", code.strip().upper())
    if not found:
        raise KeyError(code)
    code, hall, capacity, year = found[0]
    return f"{code}: {hall}, {capacity} hl, fitted {year}"


@tool
def total_of(table: str, column: str) -> str:
    """The sum of a numeric column of a table (tnk, bch or tst)."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return str(conn.execute(f"SELECT round(sum({column}), 2) FROM {table}").fetchone()[0])
'''

QUESTIONS = [
    Question("count", "How many lots has the brewery brewed?", "SELECT count(*) FROM bch", "count"),
    Question("filter", "How many tastings did the Staff panel hold?",
             "SELECT count(*) FROM tst WHERE panel_lbl = 'Staff'", "filter"),
    Question("lookup", "In which hall does tank FV-2 stand?", "SELECT hall_nm FROM tnk WHERE tnk_cd = 'FV-2'",
             "lookup"),
    Question("argmax", "Which lot is the strongest?", "SELECT lot_no FROM bch ORDER BY abv_x10 DESC LIMIT 1",
             "argmax"),
    Question("join", "How many hectolitres were brewed, in total, in the tanks of Cellar Row?",
             "SELECT round(sum(b.vol_hl), 2) FROM bch b JOIN tnk t ON t.tnk_cd = b.vessel "
             "WHERE t.hall_nm = 'Cellar Row'", "join"),
    Question("join-score", "What was the best score any pilsner lot got from a tasting panel?",
             "SELECT max(s.pts) FROM tst s JOIN bch b ON b.lot_no = s.lot_ref WHERE b.sty_cd = 'PLS'", "join"),
    Question("chain-count", "How many tastings did the stout lots get, all together?",
             "SELECT count(*) FROM tst s JOIN bch b ON b.lot_no = s.lot_ref WHERE b.sty_cd = 'STT'",
             "chain", tools="api"),
    Question("chain-hall", "In which hall was the witbier lot with the largest volume brewed?",
             "SELECT t.hall_nm FROM bch b JOIN tnk t ON t.tnk_cd = b.vessel WHERE b.sty_cd = 'WIT' "
             "ORDER BY b.vol_hl DESC LIMIT 1", "chain", tools="api"),
    Question("chain-noisy", "What style is lot L2456?", "SELECT sty_cd FROM bch WHERE lot_no = 'L2456'",
             "lookup", tools="api", fault="noisy"),
    Question("mcp-reset", "In which year was tank CT-7 fitted?", "SELECT fitted_yr FROM tnk WHERE tnk_cd = 'CT-7'",
             "lookup", tools="mcp", fault="reset"),
    Question("mcp-ratelimit", "How many tastings did lot L2449 get?",
             "SELECT count(*) FROM tst WHERE lot_ref = 'L2449'", "chain", tools="mcp", fault="ratelimit"),
    Question("plan-best", "Which lot has the highest average tasting score, and in which tank was it brewed?",
             ["SELECT lot_ref FROM tst GROUP BY lot_ref ORDER BY avg(pts) DESC LIMIT 1",
              "SELECT vessel FROM bch WHERE lot_no = (SELECT lot_ref FROM tst GROUP BY lot_ref "
              "ORDER BY avg(pts) DESC LIMIT 1)"], "composite", loop="plan"),
    Question("plan-busiest", "Which tank brewed the most lots, and in which hall does it stand?",
             ["SELECT vessel FROM bch GROUP BY vessel ORDER BY count(*) DESC, vessel LIMIT 1",
              "SELECT hall_nm FROM tnk WHERE tnk_cd = (SELECT vessel FROM bch GROUP BY vessel "
              "ORDER BY count(*) DESC, vessel LIMIT 1)"], "composite", loop="plan"),
]
