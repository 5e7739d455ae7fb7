"""A hospital laboratory's wards, analysers, specimens and test results (a confirming domain)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "wrd": "CREATE TABLE wrd (wrd_cd TEXT PRIMARY KEY, wrd_nm TEXT, flr INTEGER, cot_n INTEGER)",
    "anlz": "CREATE TABLE anlz (anlz_id TEXT PRIMARY KEY, dept_sec TEXT, mfr_mdl TEXT, inst_yr INTEGER)",
    "spcm": "CREATE TABLE spcm (lis_no TEXT PRIMARY KEY, wrd_cd TEXT, tube_cl TEXT, prio TEXT, coll_ts TEXT, "
            "tat_min INTEGER)",
    "rslt": "CREATE TABLE rslt (rslt_id INTEGER PRIMARY KEY, lis_no TEXT, anlz_id TEXT, tst_cd TEXT, num_val REAL, "
            "flag_hl TEXT)",
}
WARDS = [("CAR4N", "Cardiology North", 4, 28), ("RNL2", "Renal Unit", 2, 18), ("ICU1", "Intensive Care Unit", 1, 12),
         ("MAT3", "Maternity", 3, 32), ("PAE5", "Paediatric Ward", 5, 24), ("AMU0", "Acute Medical Unit", 0, 40),
         ("ONC6", "Oncology Day Unit", 6, 16), ("ORT3", "Orthopaedics", 3, 30), ("GER4", "Elderly Care", 4, 36),
         ("ED0", "Emergency Department", 0, 45)]
ANALYSERS = [("AN-C1", "chemistry", "Corvex CX-900", 2019), ("AN-C2", "chemistry", "Corvex CX-900", 2023),
             ("AN-I1", "immunoassay", "Lumera iQ 4", 2021), ("AN-H1", "haematology", "Hemavia H7", 2018),
             ("AN-H2", "haematology", "Hemavia H9 Pro", 2024), ("AN-G1", "coagulation", "Clotrix 3100", 2020)]
TESTS = {  # test code: bench, low and high reference limits, range of values, decimals
    "K": ("chemistry", 3.5, 5.3, (2.8, 6.6), 1), "NA": ("chemistry", 133, 146, (124, 154), 0),
    "CREA": ("chemistry", 45, 110, (30, 420), 0), "CRP": ("chemistry", 0, 5, (0.3, 260), 1),
    "TROP": ("immunoassay", 0, 14, (2, 900), 0), "TSH": ("immunoassay", 0.3, 4.2, (0.05, 9.5), 2),
    "HB": ("haematology", 115, 165, (68, 182), 0), "WBC": ("haematology", 4.0, 11.0, (1.5, 24.0), 1),
    "INR": ("coagulation", 0.8, 1.2, (0.8, 4.6), 1),
}
TUBES = {"SST": ["K", "NA", "CREA", "CRP", "TROP", "TSH"], "EDTA": ["HB", "WBC"], "CIT": ["INR"],
         "LIH": ["K", "NA", "TROP"]}


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    minutes = sorted(rng.sample(range(0, 30 * 24 * 60), 120))  # collections at different moments in March
    turnarounds = rng.sample(range(18, 600), 120)  # no two alike: one slowest
    specimens = []
    for n in range(120):
        tube = rng.choice(["SST", "SST", "EDTA", "EDTA", "CIT", "LIH"])
        day, rest = divmod(minutes[n], 24 * 60)
        stamp = f"2026-03-{day + 1:02d} {rest // 60:02d}:{rest % 60:02d}"
        specimens.append((f"S26-{401 + n:05d}", rng.choice(WARDS)[0], tube, "STAT" if rng.random() < 0.3 else "ROUT",
                          stamp, turnarounds[n]))
    results = []
    picks = [s for s in specimens] + [rng.choice(specimens) for _ in range(60)]
    for spec in picks:
        test = rng.choice(TUBES[spec[2]])
        bench, low, high, (lo, hi), decimals = TESTS[test]
        value = round(rng.uniform(lo, hi), decimals)
        flag = "H" if value > high else "L" if value < low else "N"
        analyser = rng.choice([a[0] for a in ANALYSERS if a[1] == bench])
        results.append((len(results) + 1, spec[0], analyser, test, value, flag))
    return {"wrd": WARDS, "anlz": ANALYSERS, "spcm": specimens, "rslt": results}


API = '''"""The hospital laboratory's information system API. Wards are found by name and have codes (e.g. CAR4N);
specimens have accession ids such as S26-00412 and come from one ward, with a tube type, a priority (STAT
urgent or ROUT routine), a collection time and a turnaround in minutes. A specimen's results give the test code
(K potassium, NA sodium, CREA creatinine, CRP, TROP troponin, TSH, HB haemoglobin, WBC white cells, INR), the
value, a flag (H high, L low, N normal) and the analyser id; analysers belong to a bench."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"

FIRST_CALL_FAULTS = {
    "readtimeout": lambda: TimeoutError("HTTPSConnectionPool(host='lis-gw.internal', port=443): Read timed out. "
                                        "(read timeout=10)"),
    "hostunreach": lambda: OSError(errno.EHOSTUNREACH, "No route to host"),
}
"""Faults the MCP server can inject on each tool's first call (server.py --fault NAME)."""


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def ward_by_name(name: str) -> str:
    """Find a ward by its name; returns its code, floor and number of beds."""
    found = _rows("SELECT wrd_cd, wrd_nm, flr, cot_n FROM wrd WHERE lower(wrd_nm) = lower(?)", name.strip())
    if not found:
        raise LookupError(f"no ward named {name!r}")
    code, name, floor, beds = found[0]
    return f"{name} ({code}): floor {floor}, {beds} beds"


@tool
def specimens_of_ward(ward_code: str) -> str:
    """The specimens from a ward, by its code: accession id, collection time, tube, priority and turnaround."""
    found = _rows("SELECT lis_no, coll_ts, tube_cl, prio, tat_min FROM spcm WHERE wrd_cd = ? ORDER BY coll_ts",
                  ward_code.strip().upper())
    lines = [f"{acc}: collected {when}, {tube} tube, {prio}, turnaround {tat} min"
             for acc, when, tube, prio, tat in found]
    return "\\n".join(lines) + f"\\n({len(found)} specimens)"


@tool
def specimen(accession_id: str) -> str:
    """A specimen's ward code, tube, priority, collection time and turnaround, by its accession id."""
    found = _rows("SELECT lis_no, wrd_cd, tube_cl, prio, coll_ts, tat_min FROM spcm WHERE lis_no = ?",
                  accession_id.strip().upper())
    if not found:
        raise KeyError(accession_id)
    acc, ward, tube, prio, when, tat = found[0]
    return f"{acc}: from ward {ward}, {tube} tube, {prio}, collected {when}, turnaround {tat} min"


@tool
def results_of_specimen(accession_id: str) -> str:
    """The results of a specimen, by its accession id: test code, value, flag and analyser id."""
    found = _rows("SELECT tst_cd, num_val, flag_hl, anlz_id FROM rslt WHERE lis_no = ? ORDER BY rslt_id",
                  accession_id.strip().upper())
    lines = [f"{test} = {value} ({flag}) on {analyser}" for test, value, flag, analyser in found]
    return "\\n".join(lines) + f"\\n({len(found)} results)"


@tool
def analyser(analyser_id: str) -> str:
    """An analyser's bench, make and model, and installation year, by its id."""
    found = _rows("SELECT anlz_id, dept_sec, mfr_mdl, inst_yr FROM anlz WHERE anlz_id = ?", analyser_id.strip().upper())
    if not found:
        raise KeyError(analyser_id)
    code, bench, model, year = found[0]
    return f"{code}: {model} on the {bench} bench, installed {year}"


@tool
def values_of(table: str, column: str, key_column: str, key: str) -> str:
    """The values of a column in the rows of a table (wrd, anlz, spcm or rslt) whose key_column equals key."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        found = conn.execute(f"SELECT {column} FROM {table} WHERE {key_column} = ?", (key,)).fetchall()
    return "\\n".join(str(value) for value, in found) + f"\\n({len(found)} rows)"
'''

_LAST_PAED = ("SELECT s.lis_no FROM spcm s JOIN wrd w ON w.wrd_cd = s.wrd_cd WHERE w.wrd_nm = 'Paediatric Ward' "
              "ORDER BY s.coll_ts DESC LIMIT 1")
_BUSIEST_ANALYSER = "SELECT anlz_id FROM rslt GROUP BY anlz_id ORDER BY count(*) DESC LIMIT 1"
_TOP_CRP = "SELECT lis_no FROM rslt WHERE tst_cd = 'CRP' ORDER BY num_val DESC LIMIT 1"

QUESTIONS = [
    Question("count", "How many specimens has the laboratory received?", "SELECT count(*) FROM spcm", "count"),
    Question("filter", "How many specimens were sent with urgent priority?",
             "SELECT count(*) FROM spcm WHERE prio = 'STAT'", "filter"),
    Question("filter-high", "How many test results were flagged as abnormally high?",
             "SELECT count(*) FROM rslt WHERE flag_hl = 'H'", "filter"),
    Question("lookup", "On which floor of the hospital is the Renal Unit?",
             "SELECT flr FROM wrd WHERE wrd_nm = 'Renal Unit'", "lookup"),
    Question("argmax", "Which specimen took the longest to turn around? Give its accession id.",
             "SELECT lis_no FROM spcm ORDER BY tat_min DESC LIMIT 1", "argmax"),
    Question("argmax-ward", "Which ward sent the laboratory the most specimens?",
             "SELECT w.wrd_nm FROM spcm s JOIN wrd w ON w.wrd_cd = s.wrd_cd GROUP BY w.wrd_cd "
             "ORDER BY count(*) DESC LIMIT 1", "argmax"),
    Question("join", "How many results did the analysers on the haematology bench produce?",
             "SELECT count(*) FROM rslt r JOIN anlz a ON a.anlz_id = r.anlz_id WHERE a.dept_sec = 'haematology'",
             "join"),
    Question("chain-count", "How many specimens did the lab receive from the Renal Unit?",
             "SELECT count(*) FROM spcm s JOIN wrd w ON w.wrd_cd = s.wrd_cd WHERE w.wrd_nm = 'Renal Unit'",
             "chain", tools="api"),
    Question("chain-flaky", "On which bench was the potassium on specimen S26-00402 measured?",
             "SELECT a.dept_sec FROM rslt r JOIN anlz a ON a.anlz_id = r.anlz_id WHERE r.lis_no = 'S26-00402' "
             "AND r.tst_cd = 'K'", "chain", tools="api", fault="flaky"),
    Question("chain-noisy", "What was the turnaround, in minutes, of the most recently collected specimen from "
             "the Maternity ward?",
             "SELECT s.tat_min FROM spcm s JOIN wrd w ON w.wrd_cd = s.wrd_cd WHERE w.wrd_nm = 'Maternity' "
             "ORDER BY s.coll_ts DESC LIMIT 1", "chain", tools="api", fault="noisy"),
    Question("chain-results", "How many results were reported on the most recently collected specimen from the "
             "Paediatric Ward?",
             f"SELECT count(*) FROM rslt WHERE lis_no = ({_LAST_PAED})", "chain", tools="api"),
    Question("mcp-readtimeout", "What make and model is analyser AN-H2?",
             "SELECT mfr_mdl FROM anlz WHERE anlz_id = 'AN-H2'", "lookup", tools="mcp", fault="readtimeout"),
    Question("mcp-hostunreach", "How many results were reported on specimen S26-00433?",
             "SELECT count(*) FROM rslt WHERE lis_no = 'S26-00433'", "chain", tools="mcp", fault="hostunreach"),
    Question("mcp-stall", "How many beds does the Intensive Care Unit have?",
             "SELECT cot_n FROM wrd WHERE wrd_nm = 'Intensive Care Unit'", "lookup", tools="mcp", fault="stall"),
    Question("plan-analyser", "Which analyser produced the most results, and on which bench is it?",
             [_BUSIEST_ANALYSER, f"SELECT dept_sec FROM anlz WHERE anlz_id = ({_BUSIEST_ANALYSER})"],
             "composite", loop="plan"),
    Question("plan-crp", "Which specimen had the highest CRP result, and which ward, by name, sent it?",
             [_TOP_CRP, f"SELECT w.wrd_nm FROM spcm s JOIN wrd w ON w.wrd_cd = s.wrd_cd WHERE s.lis_no = ({_TOP_CRP})"],
             "composite", loop="plan"),
]
