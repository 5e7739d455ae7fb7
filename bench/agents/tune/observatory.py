"""An observatory's targets, telescopes and observing log (a tuning domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "tgt": "CREATE TABLE tgt (tgt_no INTEGER PRIMARY KEY, desig TEXT, cls_cd TEXT, vmag REAL, constell TEXT)",
    "scope": "CREATE TABLE scope (scope_cd TEXT PRIMARY KEY, apert_mm INTEGER, site_nm TEXT, mount_kind TEXT)",
    "obs_log": "CREATE TABLE obs_log (log_no INTEGER PRIMARY KEY, tgt_no INTEGER, scope_cd TEXT, night_dt TEXT, "
               "expo_min INTEGER, seeing_as REAL)",
}

TARGETS = [
    ("NGC 6543", "PN", "Draco"), ("Messier 57", "PN", "Lyra"), ("IC 418", "PN", "Lepus"),
    ("Caldwell 39", "PN", "Gemini"), ("NGC 7009", "PN", "Aquarius"), ("NGC 6826", "PN", "Cygnus"),
    ("Messier 13", "GC", "Hercules"), ("Messier 92", "GC", "Hercules"), ("NGC 5139", "GC", "Centaurus"),
    ("Messier 3", "GC", "Canes Venatici"), ("Messier 45", "OC", "Taurus"), ("NGC 869", "OC", "Perseus"),
    ("Messier 44", "OC", "Cancer"), ("Messier 31", "GX", "Andromeda"), ("Messier 51", "GX", "Canes Venatici"),
    ("NGC 4565", "GX", "Coma Berenices"), ("Messier 42", "EN", "Orion"), ("NGC 7000", "EN", "Cygnus"),
    ("IC 1396", "EN", "Cepheus"), ("Messier 8", "EN", "Sagittarius"),
]
SCOPES = [("T1", 280, "Cerro Lindo", "equatorial fork"), ("T2", 400, "Cerro Lindo", "alt-azimuth"),
          ("T3", 610, "Roque Alto", "German equatorial"), ("T4", 355, "Mauna Seca", "equatorial fork"),
          ("T5", 1020, "Mauna Seca", "alt-azimuth"), ("T6", 203, "Kitt Ridge", "German equatorial")]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    magnitudes = [m / 10 for m in rng.sample(range(30, 116), len(TARGETS))]  # no two alike: one brightest
    targets = [(i + 1, d, c, magnitudes[i], k) for i, (d, c, k) in enumerate(TARGETS)]
    log = []
    for n in range(1, 141):
        target = rng.choice(targets)[0]
        scope = rng.choice(SCOPES)[0]
        day = f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d}"
        log.append((n, target, scope, day, rng.randint(10, 180), round(rng.uniform(0.6, 3.2), 2)))
    return {"tgt": targets, "scope": SCOPES, "obs_log": log}


API = '''"""The observatory's scheduling API. Targets are found by designation (e.g. 'NGC 6543') and have numbers;
telescopes have codes such as T3. A target's sessions list the telescope code, the exposure in minutes and the
seeing in arcseconds (lower is better)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def find_target(designation: str) -> str:
    """Find a target by its designation; returns its number, class, magnitude and constellation."""
    found = _rows("SELECT tgt_no, desig, cls_cd, vmag, constell FROM tgt WHERE lower(desig) = lower(?)",
                  designation.strip())
    if not found:
        raise LookupError(f"target not found: {designation}")
    no, desig, cls, mag, where = found[0]
    return f"target {no}: {desig}, class {cls}, magnitude {mag}, in {where}"


@tool
def sessions_of_target(target_no: int) -> str:
    """List the observing sessions of a target, by its number."""
    found = _rows("SELECT night_dt, scope_cd, expo_min, seeing_as FROM obs_log WHERE tgt_no = ? ORDER BY night_dt",
                  target_no)
    lines = [f"{day}: telescope {scope}, {minutes} min, seeing {seeing}" for day, scope, minutes, seeing in found]
    return "\\n".join(lines) + f"\\n({len(found)} sessions)"


@tool
def telescope(code: str) -> str:
    """A telescope's aperture, site and mount, by its code."""
    found = _rows("SELECT scope_cd, apert_mm, site_nm, mount_kind FROM scope WHERE scope_cd = ?", code.strip())
    if not found:
        raise KeyError(code)
    code, aperture, site, mount = found[0]
    return f"{code}: {aperture} mm aperture at {site}, {mount} mount"


@tool
def list_telescopes() -> str:
    """Every telescope: its code, aperture and site."""
    return "\\n".join(f"{c}: {a} mm at {s}" for c, a, s in _rows("SELECT scope_cd, apert_mm, site_nm FROM scope"))


@tool
def count_where(table: str, column: str, value: str) -> str:
    """Count the rows of a table (tgt, scope or obs_log) whose column equals a value."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return str(conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (value,)).fetchone()[0])
'''

QUESTIONS = [
    Question("count", "How many targets are in the observing catalogue?", "SELECT count(*) FROM tgt", "count"),
    Question("filter", "How many globular clusters are in the catalogue?",
             "SELECT count(*) FROM tgt WHERE cls_cd = 'GC'", "filter"),
    Question("lookup", "What is the aperture, in millimetres, of the telescope at Roque Alto?",
             "SELECT apert_mm FROM scope WHERE site_nm = 'Roque Alto'", "lookup"),
    Question("argmax", "Which target is the brightest, that is, has the lowest visual magnitude?",
             "SELECT desig FROM tgt ORDER BY vmag LIMIT 1", "argmax"),
    Question("join", "How many minutes of exposure did NGC 6543 get in total?",
             "SELECT sum(expo_min) FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no WHERE t.desig = 'NGC 6543'",
             "join"),
    Question("chain-count", "How many observing sessions did Messier 57 get?",
             "SELECT count(*) FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no WHERE t.desig = 'Messier 57'",
             "chain", tools="api"),
    Question("chain-site", "At which site is the telescope that observed IC 418 with the best (lowest) seeing?",
             "SELECT s.site_nm FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no JOIN scope s ON s.scope_cd = "
             "l.scope_cd WHERE t.desig = 'IC 418' ORDER BY l.seeing_as LIMIT 1", "chain", tools="api"),
    Question("chain-noisy", "Which telescope code took the longest single exposure of NGC 7009?",
             "SELECT l.scope_cd FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no WHERE t.desig = 'NGC 7009' "
             "ORDER BY l.expo_min DESC, l.night_dt LIMIT 1", "chain", tools="api", fault="noisy"),
    Question("mcp-reset", "How many observing sessions did NGC 6826 get?",
             "SELECT count(*) FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no WHERE t.desig = 'NGC 6826'",
             "chain", tools="mcp", fault="reset"),
    Question("mcp-gateway", "What kind of mount does telescope T3 have?",
             "SELECT mount_kind FROM scope WHERE scope_cd = 'T3'", "lookup", tools="mcp", fault="gateway"),
    Question("plan-exposure", "Which target got the most total exposure time, and in which constellation is it?",
             ["SELECT t.desig FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no GROUP BY t.tgt_no "
              "ORDER BY sum(l.expo_min) DESC LIMIT 1",
              "SELECT t.constell FROM obs_log l JOIN tgt t ON t.tgt_no = l.tgt_no GROUP BY t.tgt_no "
              "ORDER BY sum(l.expo_min) DESC LIMIT 1"], "composite", loop="plan"),
    Question("plan-aperture", "Which telescope has the largest aperture, and how many sessions did it record?",
             ["SELECT scope_cd FROM scope ORDER BY apert_mm DESC LIMIT 1",
              "SELECT count(*) FROM obs_log WHERE scope_cd = (SELECT scope_cd FROM scope ORDER BY apert_mm DESC "
              "LIMIT 1)"], "composite", loop="plan"),
]
