"""An upland wind farm's feeders, turbines, alarm events and monthly output (a confirming domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "fdr": "CREATE TABLE fdr (fdr_no INTEGER PRIMARY KEY, fdr_lbl TEXT, sub_nm TEXT, kv INTEGER, rtd_mw INTEGER)",
    "wtg": "CREATE TABLE wtg (wtg_tag TEXT PRIMARY KEY, fdr_no INTEGER, oem_mdl TEXT, hub_m INTEGER, "
           "comm_yr INTEGER)",
    "alm_evt": "CREATE TABLE alm_evt (evt_id INTEGER PRIMARY KEY, wtg_tag TEXT, alm_cd TEXT, evt_dt TEXT, "
               "dwn_min INTEGER)",
    "gen_mo": "CREATE TABLE gen_mo (wtg_tag TEXT, mo_no INTEGER, mwh_net INTEGER)",
}
FEEDERS = [("Hollin Edge", "Crag Lane", 33), ("Moorside", "Crag Lane", 33), ("Black Gill", "Thwaite Cross", 33),
           ("Raven Scar", "Thwaite Cross", 33), ("Cold Knuckles", "Thwaite Cross", 66)]
MODELS = ["V117-4.2", "SG 5.0-145", "N149/5.X", "E-138 EP3"]
ALARMS = ["PTCH_ASYM", "YAW_MISALN", "GRID_UV", "GBX_OILT", "ICE_DET", "CONV_TRIP", "ANEMO_FLT"]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    ratings = rng.sample(range(14, 48), len(FEEDERS))  # no two alike: one largest
    feeders = [(i + 1, label, sub, kv, ratings[i]) for i, (label, sub, kv) in enumerate(FEEDERS)]
    placement = [1] * 6 + [2] * 5 + [3] * 5 + [4] * 4 + [5] * 4
    rng.shuffle(placement)
    hubs = rng.sample(range(80, 136), len(placement))  # no two alike: one tallest anywhere
    turbines = [(f"WTG-{n:02d}", placement[n - 1], rng.choice(MODELS), hubs[n - 1], rng.randint(2009, 2023))
                for n in range(1, len(placement) + 1)]
    outages = rng.sample(range(5, 1500), 120)  # no two alike: one longest
    alarms = []
    for n in range(1, 121):
        tag = rng.choice(turbines)[0]
        alarms.append((n, tag, rng.choice(ALARMS), f"2026-{rng.randint(1, 6):02d}-{rng.randint(1, 28):02d}",
                       outages[n - 1]))
    output = [(t[0], month, rng.randint(300, 1900)) for t in turbines for month in range(1, 7)]
    return {"fdr": feeders, "wtg": turbines, "alm_evt": alarms, "gen_mo": output}


API = '''"""The wind farm's asset API. Turbines have tags such as WTG-07 and sit on one of several named feeders
(collector circuits), each with a number and a substation. A turbine's alarm events give the date, the alarm
code and the downtime in minutes; its output is given in net MWh per calendar month (months 1 to 6 of 2026)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"

FIRST_CALL_FAULTS = {
    "envoy": lambda: ConnectionError("upstream connect error or disconnect/reset before headers. "
                                     "reset reason: connection termination"),
    "gw504": lambda: TimeoutError("HTTP 504 Gateway Time-out: the upstream server did not respond in time"),
}
"""Faults the MCP server can inject on each tool's first call (server.py --fault NAME)."""


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def feeder_by_name(name: str) -> str:
    """Find a feeder by its name (e.g. 'Moorside'); returns its number, substation, voltage and rating."""
    found = _rows("SELECT fdr_no, fdr_lbl, sub_nm, kv, rtd_mw FROM fdr WHERE lower(fdr_lbl) = lower(?)", name.strip())
    if not found:
        raise LookupError(f"no feeder named {name!r}")
    no, label, sub, kv, mw = found[0]
    return f"feeder {no}: {label}, to substation {sub}, {kv} kV, rated {mw} MW"


@tool
def feeder(feeder_no: int) -> str:
    """A feeder's name, substation, voltage and rating, by its number."""
    found = _rows("SELECT fdr_no, fdr_lbl, sub_nm, kv, rtd_mw FROM fdr WHERE fdr_no = ?", feeder_no)
    if not found:
        raise KeyError(feeder_no)
    no, label, sub, kv, mw = found[0]
    return f"feeder {no}: {label}, to substation {sub}, {kv} kV, rated {mw} MW"


@tool
def turbines_on_feeder(feeder_no: int) -> str:
    """The turbines on a feeder, by the feeder's number: tag, model and hub height in metres."""
    found = _rows("SELECT wtg_tag, oem_mdl, hub_m FROM wtg WHERE fdr_no = ? ORDER BY wtg_tag", feeder_no)
    lines = [f"{tag}: {model}, hub {hub} m" for tag, model, hub in found]
    return "\\n".join(lines) + f"\\n({len(found)} turbines)"


@tool
def turbine(tag: str) -> str:
    """A turbine's feeder number, model, hub height and commissioning year, by its tag."""
    found = _rows("SELECT wtg_tag, fdr_no, oem_mdl, hub_m, comm_yr FROM wtg WHERE wtg_tag = ?", tag.strip().upper())
    if not found:
        raise KeyError(tag)
    tag, no, model, hub, year = found[0]
    return f"{tag}: on feeder {no}, {model}, hub {hub} m, commissioned {year}"


@tool
def alarms_of_turbine(tag: str) -> str:
    """A turbine's alarm events, by its tag: date, alarm code and downtime in minutes."""
    found = _rows("SELECT evt_dt, alm_cd, dwn_min FROM alm_evt WHERE wtg_tag = ? ORDER BY evt_dt",
                  tag.strip().upper())
    lines = [f"{day}: {code}, down {minutes} min" for day, code, minutes in found]
    return "\\n".join(lines) + f"\\n({len(found)} alarm events)"


@tool
def output_of_turbine(tag: str) -> str:
    """A turbine's net output in MWh for each month, by its tag."""
    found = _rows("SELECT mo_no, mwh_net FROM gen_mo WHERE wtg_tag = ? ORDER BY mo_no", tag.strip().upper())
    return "\\n".join(f"month {month}: {mwh} MWh" for month, mwh in found)


@tool
def total(table: str, column: str, where_column: str, value: str) -> str:
    """The sum of a numeric column over the rows of a table (fdr, wtg, alm_evt or gen_mo) whose where_column
    equals a value."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return str(conn.execute(f"SELECT sum({column}) FROM {table} WHERE {where_column} = ?", (value,)).fetchone()[0])
'''

_TALLEST_ON_COLD = ("SELECT w.wtg_tag FROM wtg w JOIN fdr f ON f.fdr_no = w.fdr_no WHERE f.fdr_lbl = 'Cold Knuckles' "
                    "ORDER BY w.hub_m DESC LIMIT 1")
_MOST_DOWN = "SELECT wtg_tag FROM alm_evt GROUP BY wtg_tag ORDER BY sum(dwn_min) DESC LIMIT 1"
_BIGGEST_FEEDER = "SELECT fdr_no FROM fdr ORDER BY rtd_mw DESC LIMIT 1"

QUESTIONS = [
    Question("count", "How many turbines does the wind farm have?", "SELECT count(*) FROM wtg", "count"),
    Question("filter", "How many icing alarms have been logged across the wind farm?",
             "SELECT count(*) FROM alm_evt WHERE alm_cd = 'ICE_DET'", "filter"),
    Question("filter-old", "How many turbines were commissioned before 2015?",
             "SELECT count(*) FROM wtg WHERE comm_yr < 2015", "filter"),
    Question("lookup", "Which substation does the Moorside feeder run to?",
             "SELECT sub_nm FROM fdr WHERE fdr_lbl = 'Moorside'", "lookup"),
    Question("argmax", "Which turbine had the single longest outage caused by an alarm?",
             "SELECT wtg_tag FROM alm_evt ORDER BY dwn_min DESC LIMIT 1", "argmax"),
    Question("argmax-output", "Which turbine generated the most energy over the first six months of 2026?",
             "SELECT wtg_tag FROM gen_mo GROUP BY wtg_tag ORDER BY sum(mwh_net) DESC LIMIT 1", "argmax"),
    Question("join", "How many megawatt-hours did the turbines on the Black Gill feeder generate in total?",
             "SELECT sum(g.mwh_net) FROM gen_mo g JOIN wtg w ON w.wtg_tag = g.wtg_tag JOIN fdr f ON "
             "f.fdr_no = w.fdr_no WHERE f.fdr_lbl = 'Black Gill'", "join"),
    Question("chain-count", "How many turbines are connected to the Hollin Edge feeder?",
             "SELECT count(*) FROM wtg w JOIN fdr f ON f.fdr_no = w.fdr_no WHERE f.fdr_lbl = 'Hollin Edge'",
             "chain", tools="api"),
    Question("chain-flaky", "Which substation is turbine WTG-12 connected to?",
             "SELECT f.sub_nm FROM wtg w JOIN fdr f ON f.fdr_no = w.fdr_no WHERE w.wtg_tag = 'WTG-12'",
             "chain", tools="api", fault="flaky"),
    Question("chain-noisy", "What is the hub height, in metres, of the tallest turbine on the Raven Scar feeder?",
             "SELECT max(w.hub_m) FROM wtg w JOIN fdr f ON f.fdr_no = w.fdr_no WHERE f.fdr_lbl = 'Raven Scar'",
             "chain", tools="api", fault="noisy"),
    Question("chain-alarm", "Which alarm code caused the longest outage of the tallest turbine on the Cold Knuckles "
             "feeder?",
             f"SELECT alm_cd FROM alm_evt WHERE wtg_tag = ({_TALLEST_ON_COLD}) ORDER BY dwn_min DESC LIMIT 1",
             "chain", tools="api"),
    Question("mcp-envoy", "How many alarm events has turbine WTG-04 logged?",
             "SELECT count(*) FROM alm_evt WHERE wtg_tag = 'WTG-04'", "chain", tools="mcp", fault="envoy"),
    Question("mcp-gw504", "Which turbine model is installed at position WTG-15?",
             "SELECT oem_mdl FROM wtg WHERE wtg_tag = 'WTG-15'", "lookup", tools="mcp", fault="gw504"),
    Question("plan-downtime", "Which turbine lost the most minutes to alarm outages in total, and what is the name "
             "of the feeder it is on?",
             [_MOST_DOWN,
              f"SELECT f.fdr_lbl FROM wtg w JOIN fdr f ON f.fdr_no = w.fdr_no WHERE w.wtg_tag = ({_MOST_DOWN})"],
             "composite", loop="plan"),
    Question("plan-feeder", "Which feeder has the highest rated capacity, and how many turbines are on it?",
             [f"SELECT fdr_lbl FROM fdr WHERE fdr_no = ({_BIGGEST_FEEDER})",
              f"SELECT count(*) FROM wtg WHERE fdr_no = ({_BIGGEST_FEEDER})"], "composite", loop="plan"),
]
