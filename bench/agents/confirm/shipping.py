"""A container line's vessels, service loops, ports and port calls (a confirming domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "svc_lp": "CREATE TABLE svc_lp (lp_cd TEXT PRIMARY KEY, lp_nm TEXT, rot_wk INTEGER)",
    "hull": "CREATE TABLE hull (lr_no INTEGER PRIMARY KEY, vsl_nm TEXT, nom_teu INTEGER, flag_st TEXT, "
            "blt_yr INTEGER, lp_cd TEXT)",
    "unloc": "CREATE TABLE unloc (locode TEXT PRIMARY KEY, port_nm TEXT, ctry TEXT, max_drft_m REAL)",
    "pc": "CREATE TABLE pc (call_id INTEGER PRIMARY KEY, lr_no INTEGER, locode TEXT, ata_dt TEXT, "
          "alongside_h INTEGER, mv_box INTEGER)",
}
LOOPS = [("JDX", "Jade Express"), ("LVS", "Levant Shuttle"), ("BFR", "Baltic Feeder Ring"),
         ("IWX", "Indus West Express")]
VESSELS = ["Nordic Tern", "Caspian Meridian", "Arlo Bay", "Santa Brisa", "Kestrel Express", "Ophira", "Hansa Vega",
           "Pacific Lark", "Tolva Star", "Indra Maru", "Corvina", "Baltic Wren", "Sable Horizon", "Mira Coast",
           "Leeward Spirit", "Atlas Juno"]
FLAGS = ["Liberia", "Panama", "Marshall Islands", "Malta", "Singapore", "Denmark"]
PORTS = [("NLRTM", "Rotterdam", "Netherlands"), ("DEHAM", "Hamburg", "Germany"), ("BEANR", "Antwerp", "Belgium"),
         ("SGSIN", "Singapore", "Singapore"), ("CNSHA", "Shanghai", "China"), ("KRPUS", "Busan", "South Korea"),
         ("ESALG", "Algeciras", "Spain"), ("EGPSD", "Port Said", "Egypt"), ("LKCMB", "Colombo", "Sri Lanka"),
         ("MAPTM", "Tanger Med", "Morocco")]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    rotations = rng.sample(range(4, 14), len(LOOPS))  # no two alike: one longest
    loops = [(code, name, rotations[i]) for i, (code, name) in enumerate(LOOPS)]
    deployment = ["JDX"] * 5 + ["LVS"] * 4 + ["BFR"] * 4 + ["IWX"] * 3
    rng.shuffle(deployment)
    imos = rng.sample(range(9150000, 9899999), len(VESSELS))
    capacities = rng.sample(range(1700, 16000, 10), len(VESSELS))
    built = rng.sample(range(1998, 2025), len(VESSELS))  # no two alike: one oldest
    vessels = [(imos[i], name, capacities[i], rng.choice(FLAGS), built[i], deployment[i])
               for i, name in enumerate(VESSELS)]
    ports = [(code, name, country, rng.randint(120, 180) / 10) for code, name, country in PORTS]
    hours = rng.sample(range(6, 160), 150)  # no two calls alike: one longest at berth
    calls = []
    for n in range(1, 151):
        imo = rng.choice(vessels)[0]
        port = rng.choice(ports)[0]
        calls.append((n, imo, port, f"2026-{rng.randint(1, 9):02d}-{rng.randint(1, 28):02d}", hours[n - 1],
                      rng.randint(250, 4200)))
    return {"svc_lp": loops, "hull": vessels, "unloc": ports, "pc": calls}


API = '''"""The container line's voyage API. Vessels are found by name and identified by their IMO number; each is
deployed on one service loop (a code such as JDX, with a rotation length in weeks). Ports are found by name and
identified by their UN/LOCODE (e.g. NLRTM). A port call gives the vessel, the port, the arrival date, the
hours spent at berth and the number of container moves (boxes loaded and discharged)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


class RateLimitExceeded(Exception):
    """The voyage service's throttling answer."""

    status_code = 429
    retry_after = 2


FIRST_CALL_FAULTS = {
    "throttled": lambda: RateLimitExceeded("429 rate limit exceeded, Retry-After: 2"),
    "brokenpipe": lambda: BrokenPipeError(32, "Broken pipe"),
}
"""Faults the MCP server can inject on each tool's first call (server.py --fault NAME)."""


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


def _vessel(where: str, arg: object) -> str:
    found = _rows(f"SELECT lr_no, vsl_nm, nom_teu, flag_st, blt_yr, lp_cd FROM hull WHERE {where}", arg)
    if not found:
        raise LookupError(f"vessel not found: {arg}")
    imo, name, teu, flag, year, loop = found[0]
    return f"{name} (IMO {imo}): {teu} TEU, flag {flag}, built {year}, deployed on loop {loop}"


@tool
def vessel_by_name(name: str) -> str:
    """Find a vessel by its name; returns its IMO number, capacity in TEU, flag, build year and loop code."""
    return _vessel("lower(vsl_nm) = lower(?)", name.strip())


@tool
def vessel(imo_number: int) -> str:
    """A vessel's name, capacity, flag, build year and loop code, by its IMO number."""
    return _vessel("lr_no = ?", imo_number)


@tool
def calls_of_vessel(imo_number: int) -> str:
    """The port calls of a vessel, by its IMO number: arrival date, port LOCODE, hours at berth and moves."""
    found = _rows("SELECT ata_dt, locode, alongside_h, mv_box FROM pc WHERE lr_no = ? ORDER BY ata_dt", imo_number)
    lines = [f"{day}: {port}, {hours} h at berth, {moves} moves" for day, port, hours, moves in found]
    return "\\n".join(lines) + f"\\n({len(found)} port calls)"


@tool
def port_by_name(name: str) -> str:
    """Find a port by its name; returns its LOCODE, country and maximum draught in metres."""
    found = _rows("SELECT locode, port_nm, ctry, max_drft_m FROM unloc WHERE lower(port_nm) = lower(?)", name.strip())
    if not found:
        raise LookupError(f"port not found: {name}")
    code, name, country, draught = found[0]
    return f"{name} ({code}), {country}: maximum draught {draught} m"


@tool
def port(locode: str) -> str:
    """A port's name, country and maximum draught in metres, by its LOCODE."""
    found = _rows("SELECT locode, port_nm, ctry, max_drft_m FROM unloc WHERE locode = ?", locode.strip().upper())
    if not found:
        raise KeyError(locode)
    code, name, country, draught = found[0]
    return f"{name} ({code}), {country}: maximum draught {draught} m"


@tool
def calls_at_port(locode: str) -> str:
    """The port calls made at a port, by its LOCODE: arrival date, vessel IMO number, hours at berth, moves."""
    found = _rows("SELECT ata_dt, lr_no, alongside_h, mv_box FROM pc WHERE locode = ? ORDER BY ata_dt",
                  locode.strip().upper())
    lines = [f"{day}: IMO {imo}, {hours} h at berth, {moves} moves" for day, imo, hours, moves in found]
    return "\\n".join(lines) + f"\\n({len(found)} port calls)"


@tool
def loop(loop_code: str) -> str:
    """A service loop's name and rotation length in weeks, by its code."""
    found = _rows("SELECT lp_cd, lp_nm, rot_wk FROM svc_lp WHERE lp_cd = ?", loop_code.strip().upper())
    if not found:
        raise KeyError(loop_code)
    code, name, weeks = found[0]
    return f"loop {code}: {name}, {weeks}-week rotation"


@tool
def vessels_on_loop(loop_code: str) -> str:
    """The vessels deployed on a service loop, by its code: name, IMO number and capacity."""
    found = _rows("SELECT vsl_nm, lr_no, nom_teu FROM hull WHERE lp_cd = ? ORDER BY vsl_nm",
                  loop_code.strip().upper())
    lines = [f"{name} (IMO {imo}), {teu} TEU" for name, imo, teu in found]
    return "\\n".join(lines) + f"\\n({len(found)} vessels)"


@tool
def top_rows(table: str, order_column: str, n: int = 5) -> str:
    """The n rows of a table (svc_lp, hull, unloc or pc) with the largest values of a column."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        found = conn.execute(f"SELECT * FROM {table} ORDER BY {order_column} DESC LIMIT ?", (n,)).fetchall()
    return "\\n".join(" | ".join(str(v) for v in row) for row in found)
'''

_BUSIEST = "SELECT lr_no FROM pc GROUP BY lr_no ORDER BY count(*) DESC LIMIT 1"
_LONGEST_LOOP = "SELECT lp_cd FROM svc_lp ORDER BY rot_wk DESC LIMIT 1"

QUESTIONS = [
    Question("count", "How many vessels does the line operate?", "SELECT count(*) FROM hull", "count"),
    Question("filter", "How many of the line's vessels sail under the Maltese flag?",
             "SELECT count(*) FROM hull WHERE flag_st = 'Malta'", "filter"),
    Question("filter-long", "How many port calls kept the vessel at berth for more than 100 hours?",
             "SELECT count(*) FROM pc WHERE alongside_h > 100", "filter"),
    Question("lookup", "What is the container capacity, in TEU, of the Kestrel Express?",
             "SELECT nom_teu FROM hull WHERE vsl_nm = 'Kestrel Express'", "lookup"),
    Question("argmax", "Which vessel in the fleet was built earliest?",
             "SELECT vsl_nm FROM hull ORDER BY blt_yr LIMIT 1", "argmax"),
    Question("argmax-berth", "At which port did the line's vessels spend the most hours at berth in total?",
             "SELECT u.port_nm FROM pc p JOIN unloc u ON u.locode = p.locode GROUP BY u.locode "
             "ORDER BY sum(p.alongside_h) DESC LIMIT 1", "argmax"),
    Question("join", "How many container moves did the Nordic Tern handle across all of its port calls?",
             "SELECT sum(p.mv_box) FROM pc p JOIN hull h ON h.lr_no = p.lr_no WHERE h.vsl_nm = 'Nordic Tern'",
             "join"),
    Question("chain-count", "How many port calls did the Caspian Meridian make?",
             "SELECT count(*) FROM pc p JOIN hull h ON h.lr_no = p.lr_no WHERE h.vsl_nm = 'Caspian Meridian'",
             "chain", tools="api"),
    Question("chain-flaky", "In which country is the port where the Hansa Vega spent the longest at berth on a "
             "single call?",
             "SELECT u.ctry FROM pc p JOIN hull h ON h.lr_no = p.lr_no JOIN unloc u ON u.locode = p.locode "
             "WHERE h.vsl_nm = 'Hansa Vega' ORDER BY p.alongside_h DESC LIMIT 1", "chain", tools="api", fault="flaky"),
    Question("chain-noisy", "How many weeks does one rotation of the service the Ophira sails on take?",
             "SELECT l.rot_wk FROM hull h JOIN svc_lp l ON l.lp_cd = h.lp_cd WHERE h.vsl_nm = 'Ophira'",
             "chain", tools="api", fault="noisy"),
    Question("chain-fleet", "How many vessels are deployed on the same service as the Atlas Juno, counting it?",
             "SELECT count(*) FROM hull WHERE lp_cd = (SELECT lp_cd FROM hull WHERE vsl_nm = 'Atlas Juno')",
             "chain", tools="api"),
    Question("mcp-throttled", "How many port calls were made at Busan?",
             "SELECT count(*) FROM pc p JOIN unloc u ON u.locode = p.locode WHERE u.port_nm = 'Busan'",
             "chain", tools="mcp", fault="throttled"),
    Question("mcp-brokenpipe", "What is the maximum draught allowed at Tanger Med, in metres?",
             "SELECT max_drft_m FROM unloc WHERE port_nm = 'Tanger Med'", "lookup", tools="mcp",
             fault="brokenpipe"),
    Question("plan-busiest", "Which vessel made the most port calls, and what is its IMO number?",
             [f"SELECT vsl_nm FROM hull WHERE lr_no = ({_BUSIEST})", _BUSIEST], "composite", loop="plan"),
    Question("plan-loop", "Which service has the longest rotation, and how many vessels are deployed on it?",
             [f"SELECT lp_nm FROM svc_lp WHERE lp_cd = ({_LONGEST_LOOP})",
              f"SELECT count(*) FROM hull WHERE lp_cd = ({_LONGEST_LOOP})"], "composite", loop="plan"),
]
