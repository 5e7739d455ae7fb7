"""A regional railway's stations, services and delays (a tuning domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "stn": "CREATE TABLE stn (stn_cd TEXT PRIMARY KEY, stn_nm TEXT, plat_n INTEGER, opened_yr INTEGER)",
    "svc": "CREATE TABLE svc (svc_no TEXT PRIMARY KEY, orig_cd TEXT, dest_cd TEXT, stock_cls TEXT, seats INTEGER)",
    "dly": "CREATE TABLE dly (dly_id INTEGER PRIMARY KEY, svc_no TEXT, run_dt TEXT, late_min INTEGER, "
           "cause_cd TEXT)",
}
STATIONS = [("ABV", "Aberavon Vale", 4, 1868), ("BRK", "Brackenholt", 2, 1902), ("CWL", "Cwmlais", 3, 1871),
            ("DNF", "Dunfarrow", 6, 1859), ("ESK", "Eskmere Junction", 5, 1884), ("FLW", "Fallowby", 2, 1921),
            ("GRT", "Garthwen", 1, 1934), ("HLM", "Holmbridge Parkway", 4, 1998), ("ILF", "Ilfracombe Spa", 3, 1874)]
STOCK = ["class 150", "class 158", "class 170", "class 197", "class 231"]
CAUSES = ["SIG", "TRK", "CRW", "WTH", "FLT", "PAX"]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    services = []
    for n in range(1, 23):
        origin, dest = rng.sample([s[0] for s in STATIONS], 2)
        stock = rng.choice(STOCK)
        services.append((f"2R{n:02d}", origin, dest, stock, rng.randint(90, 380)))
    delays = []
    for n in range(1, 161):
        service = rng.choice(services)[0]
        delays.append((n, service, f"2026-{rng.randint(5, 10):02d}-{rng.randint(1, 28):02d}", rng.randint(1, 97),
                        rng.choice(CAUSES)))
    return {"stn": STATIONS, "svc": services, "dly": delays}


API = '''"""The railway's operations API. Stations have three-letter codes (e.g. DNF) and names; services have
numbers such as 2R07 and run from an origin station to a destination; a delay record gives the date, the
minutes late and a cause code (SIG signalling, TRK track, CRW crew, WTH weather, FLT train fault, PAX
passengers)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def station_by_name(name: str) -> str:
    """A station by its name: its code, platforms and opening year."""
    found = _rows("SELECT stn_cd, stn_nm, plat_n, opened_yr FROM stn WHERE lower(stn_nm) = lower(?)", name.strip())
    if not found:
        raise LookupError(f"unknown station {name!r}")
    code, name, platforms, year = found[0]
    return f"{name} ({code}): {platforms} platforms, opened {year}"


@tool
def services_from(station_code: str) -> str:
    """The services that start at a station, by its code: number, destination code and rolling stock."""
    found = _rows("SELECT svc_no, dest_cd, stock_cls FROM svc WHERE orig_cd = ? ORDER BY svc_no",
                  station_code.strip().upper())
    return "\\n".join(f"{no} to {dest}, {stock}" for no, dest, stock in found) + f"\\n({len(found)} services)"


@tool
def delays_of(service_no: str) -> str:
    """The delays of a service, by its number: date, minutes late and cause code."""
    found = _rows("SELECT run_dt, late_min, cause_cd FROM dly WHERE svc_no = ? ORDER BY run_dt",
                  service_no.strip().upper())
    return "\\n".join(f"{day}: {late} min late ({cause})" for day, late, cause in found) + f"\\n({len(found)} delays)"


@tool
def service(service_no: str) -> str:
    """A service's origin and destination codes, rolling stock and seats, by its number."""
    found = _rows("SELECT svc_no, orig_cd, dest_cd, stock_cls, seats FROM svc WHERE svc_no = ?",
                  service_no.strip().upper())
    if not found:
        raise KeyError(service_no)
    no, origin, dest, stock, seats = found[0]
    return f"{no}: {origin} to {dest}, {stock}, {seats} seats"


@tool
def rows_matching(table: str, where: str) -> str:
    """The number of rows of a table (stn, svc or dly) matching an SQL condition."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return str(conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0])
'''

QUESTIONS = [
    Question("count", "How many services does the railway run?", "SELECT count(*) FROM svc", "count"),
    Question("filter", "How many delays were caused by signalling (cause code SIG)?",
             "SELECT count(*) FROM dly WHERE cause_cd = 'SIG'", "filter"),
    Question("lookup", "How many platforms does Eskmere Junction have?",
             "SELECT plat_n FROM stn WHERE stn_nm = 'Eskmere Junction'", "lookup"),
    Question("argmax", "Which service has the most seats?", "SELECT svc_no FROM svc ORDER BY seats DESC LIMIT 1",
             "argmax"),
    Question("join", "How many minutes late, in total, were services that start at Dunfarrow?",
             "SELECT sum(d.late_min) FROM dly d JOIN svc s ON s.svc_no = d.svc_no JOIN stn t ON t.stn_cd = s.orig_cd "
             "WHERE t.stn_nm = 'Dunfarrow'", "join"),
    Question("chain-count", "How many services start at Brackenholt?",
             "SELECT count(*) FROM svc s JOIN stn t ON t.stn_cd = s.orig_cd WHERE t.stn_nm = 'Brackenholt'",
             "chain", tools="api"),
    Question("chain-worst", "What was the longest delay, in minutes, of any service starting at Cwmlais?",
             "SELECT max(d.late_min) FROM dly d JOIN svc s ON s.svc_no = d.svc_no WHERE s.orig_cd = 'CWL'",
             "chain", tools="api"),
    Question("chain-noisy", "Which rolling stock class runs service 2R05?",
             "SELECT stock_cls FROM svc WHERE svc_no = '2R05'", "lookup", tools="api", fault="noisy"),
    Question("mcp-reset", "In which year did Garthwen station open?",
             "SELECT opened_yr FROM stn WHERE stn_nm = 'Garthwen'", "lookup", tools="mcp", fault="reset"),
    Question("mcp-gateway", "How many delays did service 2R11 have?",
             "SELECT count(*) FROM dly WHERE svc_no = '2R11'", "chain", tools="mcp", fault="gateway"),
    Question("plan-late", "Which service lost the most minutes to delays in total, and from which station (by name) "
             "does it start?",
             ["SELECT svc_no FROM dly GROUP BY svc_no ORDER BY sum(late_min) DESC LIMIT 1",
              "SELECT t.stn_nm FROM svc s JOIN stn t ON t.stn_cd = s.orig_cd WHERE s.svc_no = (SELECT svc_no FROM dly "
              "GROUP BY svc_no ORDER BY sum(late_min) DESC LIMIT 1)"], "composite", loop="plan"),
    Question("plan-oldest", "Which is the oldest station, and how many services start there?",
             ["SELECT stn_nm FROM stn ORDER BY opened_yr LIMIT 1",
              "SELECT count(*) FROM svc WHERE orig_cd = (SELECT stn_cd FROM stn ORDER BY opened_yr LIMIT 1)"],
             "composite", loop="plan"),
]
