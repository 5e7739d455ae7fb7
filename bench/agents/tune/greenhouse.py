"""A research greenhouse's beds, sensor readings and harvests (a tuning domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "bed": "CREATE TABLE bed (bed_ref TEXT PRIMARY KEY, zone_lbl TEXT, crop_kind TEXT, sown_wk INTEGER)",
    "rdg": "CREATE TABLE rdg (rdg_id INTEGER PRIMARY KEY, bed_ref TEXT, metric TEXT, val REAL, taken_on TEXT)",
    "hvst": "CREATE TABLE hvst (hv_id INTEGER PRIMARY KEY, bed_ref TEXT, kg_yield REAL, hv_wk INTEGER, "
            "grade_cd TEXT)",
}
CROPS = ["basil", "tomato", "lettuce", "pepper", "cucumber", "strawberry", "chard"]
ZONES = ["North A", "North B", "South A", "South B", "Atrium"]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    beds = []
    for n in range(1, 19):
        beds.append((f"B-{n:02d}", ZONES[(n - 1) % len(ZONES)], CROPS[(n * 3) % len(CROPS)], rng.randint(2, 20)))
    readings = []
    for n in range(1, 181):
        bed = rng.choice(beds)[0]
        metric = rng.choice(["temp_c", "humidity_pct", "ec_ms"])
        value = {"temp_c": rng.uniform(14, 31), "humidity_pct": rng.uniform(40, 95), "ec_ms": rng.uniform(0.8, 3.4)}
        day = f"2026-0{rng.randint(3, 9)}-{rng.randint(1, 28):02d}"
        readings.append((n, bed, metric, round(value[metric], 2), day))
    harvests = []
    for n in range(1, 61):
        bed = rng.choice(beds)[0]
        harvests.append((n, bed, round(rng.uniform(0.4, 18.0), 2), rng.randint(14, 40), rng.choice("ABC")))
    return {"bed": beds, "rdg": readings, "hvst": harvests}


API = '''"""The greenhouse's monitoring API. Beds have references such as B-07 and grow one crop each; a bed's
readings are temperature (temp_c), humidity (humidity_pct) and conductivity (ec_ms); its harvests give a
weight in kg, a week number and a grade (A is best)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def beds_growing(crop: str) -> str:
    """The beds that grow a crop (e.g. 'tomato'), with their zones."""
    found = _rows("SELECT bed_ref, zone_lbl FROM bed WHERE crop_kind = ? ORDER BY bed_ref", crop.strip().lower())
    if not found:
        raise LookupError(f"no bed grows {crop}")
    return "\\n".join(f"{ref} in {zone}" for ref, zone in found)


@tool
def bed_details(bed_ref: str) -> str:
    """A bed's zone, crop and sowing week, by its reference."""
    found = _rows("SELECT bed_ref, zone_lbl, crop_kind, sown_wk FROM bed WHERE bed_ref = ?", bed_ref.strip())
    if not found:
        raise KeyError(bed_ref)
    ref, zone, crop, week = found[0]
    return f"{ref}: {crop} in {zone}, sown in week {week}"


@tool
def harvests_of_bed(bed_ref: str) -> str:
    """Every harvest of a bed: week, weight in kg and grade."""
    found = _rows("SELECT hv_wk, kg_yield, grade_cd FROM hvst WHERE bed_ref = ? ORDER BY hv_wk", bed_ref.strip())
    lines = [f"week {week}: {kg} kg, grade {grade}" for week, kg, grade in found]
    return "\\n".join(lines) + f"\\n({len(found)} harvests)"


@tool
def readings_of_bed(bed_ref: str, metric: str) -> str:
    """A bed's readings of one metric (temp_c, humidity_pct or ec_ms), by date."""
    found = _rows("SELECT taken_on, val FROM rdg WHERE bed_ref = ? AND metric = ? ORDER BY taken_on", bed_ref.strip(),
                  metric.strip())
    return "\\n".join(f"{day}: {value}" for day, value in found) + f"\\n({len(found)} readings)"


@tool
def average_of(table: str, column: str) -> str:
    """The average of a numeric column of a table (bed, rdg or hvst)."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return str(conn.execute(f"SELECT round(avg({column}), 2) FROM {table}").fetchone()[0])
'''

QUESTIONS = [
    Question("count", "How many beds does the greenhouse have?", "SELECT count(*) FROM bed", "count"),
    Question("filter", "How many harvests were graded A?", "SELECT count(*) FROM hvst WHERE grade_cd = 'A'", "filter"),
    Question("lookup", "Which crop grows in bed B-11?", "SELECT crop_kind FROM bed WHERE bed_ref = 'B-11'", "lookup"),
    Question("argmax", "Which bed gave the single heaviest harvest?",
             "SELECT bed_ref FROM hvst ORDER BY kg_yield DESC LIMIT 1", "argmax"),
    Question("join", "How many kilograms were harvested in total from beds in the Atrium zone?",
             "SELECT round(sum(h.kg_yield), 2) FROM hvst h JOIN bed b ON b.bed_ref = h.bed_ref "
             "WHERE b.zone_lbl = 'Atrium'", "join"),
    Question("chain-count", "How many harvests did the beds growing strawberry give, all together?",
             "SELECT count(*) FROM hvst h JOIN bed b ON b.bed_ref = h.bed_ref WHERE b.crop_kind = 'strawberry'",
             "chain", tools="api"),
    Question("chain-zone", "In which zone is the bed that gave the heaviest single basil harvest?",
             "SELECT b.zone_lbl FROM hvst h JOIN bed b ON b.bed_ref = h.bed_ref WHERE b.crop_kind = 'basil' "
             "ORDER BY h.kg_yield DESC LIMIT 1", "chain", tools="api"),
    Question("chain-noisy", "In which week was bed B-04 sown?", "SELECT sown_wk FROM bed WHERE bed_ref = 'B-04'",
             "lookup", tools="api", fault="noisy"),
    Question("mcp-reset", "How many humidity readings were taken in bed B-02?",
             "SELECT count(*) FROM rdg WHERE bed_ref = 'B-02' AND metric = 'humidity_pct'", "chain", tools="mcp",
             fault="reset"),
    Question("mcp-gateway", "Which beds grow chard? Name them all.",
             [f"SELECT bed_ref FROM bed WHERE crop_kind = 'chard' ORDER BY bed_ref LIMIT 1 OFFSET {n}"
              for n in range(3)], "lookup", tools="mcp", fault="gateway"),
    Question("plan-heaviest", "Which crop grows in the bed with the heaviest total harvest, and in which zone is "
             "that bed?",
             ["SELECT b.crop_kind FROM hvst h JOIN bed b ON b.bed_ref = h.bed_ref GROUP BY b.bed_ref "
              "ORDER BY sum(h.kg_yield) DESC LIMIT 1",
              "SELECT b.zone_lbl FROM hvst h JOIN bed b ON b.bed_ref = h.bed_ref GROUP BY b.bed_ref "
              "ORDER BY sum(h.kg_yield) DESC LIMIT 1"], "composite", loop="plan"),
    Question("plan-warmest", "Which bed had the highest single temperature reading, and what crop grows there?",
             ["SELECT bed_ref FROM rdg WHERE metric = 'temp_c' ORDER BY val DESC LIMIT 1",
              "SELECT crop_kind FROM bed WHERE bed_ref = (SELECT bed_ref FROM rdg WHERE metric = 'temp_c' "
              "ORDER BY val DESC LIMIT 1)"], "composite", loop="plan"),
]
