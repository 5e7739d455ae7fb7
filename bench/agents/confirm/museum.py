"""A museum's register of objects, partner institutions, loan agreements and condition reports (a confirming
domain)."""

from __future__ import annotations

import datetime
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

TABLES = {
    "inst": "CREATE TABLE inst (inst_id INTEGER PRIMARY KEY, inst_nm TEXT, cty TEXT, ctry_iso TEXT)",
    "obj_reg": "CREATE TABLE obj_reg (inv_ref TEXT PRIMARY KEY, ttl TEXT, mkr TEXT, medm TEXT, ins_val_k INTEGER)",
    "ln_agr": "CREATE TABLE ln_agr (agr_ref TEXT PRIMARY KEY, inv_ref TEXT, inst_id INTEGER, dir TEXT, dep_dt TEXT, "
              "ret_dt TEXT, fee_eur INTEGER)",
    "cond_rpt": "CREATE TABLE cond_rpt (rpt_no INTEGER PRIMARY KEY, agr_ref TEXT, stage TEXT, cond_gr INTEGER, "
                "examiner TEXT)",
}
INSTITUTIONS = [("Kunsthal Ostwijk", "Rotterdam", "NL"), ("Museo Civico di Sarnate", "Bologna", "IT"),
                ("Hallwyl Gallery", "Stockholm", "SE"), ("Fenwick Art Trust", "Edinburgh", "GB"),
                ("Galerie Marchetti", "Paris", "FR"), ("Brandt Sammlung", "Munich", "DE"),
                ("Palacio de Lorca", "Madrid", "ES"), ("Whitcombe Museum", "Boston", "US"),
                ("Tanabe Art Hall", "Osaka", "JP"), ("Kelvinside Collection", "Glasgow", "GB")]
OBJECTS = [("Harbour at Dusk", "Ada Vinckboons", "OC"), ("Portrait of a Lacemaker", "Teodor Maresch", "OC"),
           ("The Salt Marsh", "Elin Rasmusdotter", "WC"), ("Bronze Heron", "Paul Okafor-Lind", "BRZ"),
           ("Still Life with Quinces", "Jacoba van Heel", "OC"), ("Blue Jug", "Mireille Sauvat", "CER"),
           ("Tapestry of the Four Seasons", "Workshop of Gerrit Loos", "TXT"), ("Kneeling Archer", "Iwan Strobel",
                                                                               "BRZ"),
           ("Orchard in Snow", "Ada Vinckboons", "OC"), ("River Ferry at Noon", "Hamish Dunleavy", "WC"),
           ("Lidded Tureen", "Mireille Sauvat", "CER"), ("The Weaver's Daughter", "Teodor Maresch", "OC"),
           ("Dancer Resting", "Iwan Strobel", "BRZ"), ("Quarry Road", "Hamish Dunleavy", "WC"),
           ("Sampler with Alphabet", "Unknown maker", "TXT"), ("Twin Amphorae", "Corinne Achterberg", "CER"),
           ("Study of Gulls", "Elin Rasmusdotter", "WC"), ("Night Market", "Jacoba van Heel", "OC"),
           ("Horse and Groom", "Paul Okafor-Lind", "BRZ"), ("Celadon Bowl", "Corinne Achterberg", "CER"),
           ("Altar Frontal", "Workshop of Gerrit Loos", "TXT"), ("View of Dalby Mill", "Hamish Dunleavy", "OC"),
           ("Seated Scholar", "Iwan Strobel", "BRZ"), ("Winter Light, Skagen", "Elin Rasmusdotter", "OC")]
EXAMINERS = ["R. Okonjo", "M. Lindqvist", "S. Farrant", "J. Beaulieu"]


def rows(rng: random.Random) -> dict[str, list[tuple]]:
    institutions = [(i + 1, name, city, iso) for i, (name, city, iso) in enumerate(INSTITUTIONS)]
    values = rng.sample(range(40, 9000), len(OBJECTS))  # no two alike: one most valuable
    years = rng.sample(range(1952, 2024), len(OBJECTS))
    objects = [(f"MC.{years[i]}.{rng.randint(10, 499):03d}", title, maker, medium, values[i])
               for i, (title, maker, medium) in enumerate(OBJECTS)]
    fees = rng.sample(range(10, 400), 64)  # fees in fifties of euros, no two alike
    days = rng.sample(range(0, 1400), 64)  # departures on different days
    loans, reports = [], []
    for n in range(1, 65):
        obj = rng.choice(objects)[0]
        inst = rng.choice(institutions)[0]
        direction = "OUT" if rng.random() < 0.65 else "IN"
        out = datetime.date(2022, 6, 1) + datetime.timedelta(days=days[n - 1])
        back = out + datetime.timedelta(days=rng.randint(30, 300))
        ref = f"LA-{out.year % 100:02d}-{n:03d}"
        loans.append((ref, obj, inst, direction, out.isoformat(), back.isoformat(), fees[n - 1] * 50))
        for stage in ("pre", "post"):
            reports.append((len(reports) + 1, ref, stage, rng.randint(1, 5), rng.choice(EXAMINERS)))
    return {"inst": institutions, "obj_reg": objects, "ln_agr": loans, "cond_rpt": reports}


API = '''"""The museum's collections and loans API. Objects are found by title and have accession numbers such as
MC.1987.114; partner institutions are found by name and have numbers. A loan agreement (reference such as
LA-24-031) lends one object, either OUT (the museum lends it to the institution) or IN (the institution lends
it to the museum), between a departure and a return date, for a fee in euros. Each agreement has condition
reports before (pre) and after (post) the loan, graded 1 (excellent) to 5 (poor)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reflexa import tool

DB = Path(__file__).parent / "domain.sqlite"


class UpstreamHTTPError(Exception):
    """An HTTP error from the collections service, with its status code."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


FIRST_CALL_FAULTS = {
    "unavailable": lambda: UpstreamHTTPError(503, "503 Service Temporarily Unavailable"),
    "refused": lambda: ConnectionRefusedError(111, "connect ECONNREFUSED 10.20.4.17:5432"),
}
"""Faults the MCP server can inject on each tool's first call (server.py --fault NAME)."""


def _rows(sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


@tool
def object_by_title(title: str) -> str:
    """Find an object by its title; returns its accession number, maker, medium code and insured value."""
    found = _rows("SELECT inv_ref, ttl, mkr, medm, ins_val_k FROM obj_reg WHERE lower(ttl) = lower(?)",
                  title.strip().strip("'\\""))
    if not found:
        raise LookupError(f"no object titled {title!r}")
    acc, title, maker, medium, value = found[0]
    return f"{acc}: '{title}' by {maker}, medium {medium}, insured for {value} thousand EUR"


@tool
def object_record(accession_no: str) -> str:
    """An object's title, maker, medium code and insured value, by its accession number."""
    found = _rows("SELECT inv_ref, ttl, mkr, medm, ins_val_k FROM obj_reg WHERE inv_ref = ?", accession_no.strip())
    if not found:
        raise KeyError(accession_no)
    acc, title, maker, medium, value = found[0]
    return f"{acc}: '{title}' by {maker}, medium {medium}, insured for {value} thousand EUR"


@tool
def loans_of_object(accession_no: str) -> str:
    """The loan agreements of an object, by its accession number: reference, direction, institution number,
    dates and fee."""
    found = _rows("SELECT agr_ref, dir, inst_id, dep_dt, ret_dt, fee_eur FROM ln_agr WHERE inv_ref = ? "
                  "ORDER BY dep_dt", accession_no.strip())
    lines = [f"{ref}: {way} with institution {inst}, {out} to {back}, fee {fee} EUR"
             for ref, way, inst, out, back, fee in found]
    return "\\n".join(lines) + f"\\n({len(found)} loan agreements)"


@tool
def institution_by_name(name: str) -> str:
    """Find a partner institution by its name; returns its number, city and country code."""
    found = _rows("SELECT inst_id, inst_nm, cty, ctry_iso FROM inst WHERE lower(inst_nm) = lower(?)", name.strip())
    if not found:
        raise LookupError(f"no institution named {name!r}")
    no, name, city, iso = found[0]
    return f"institution {no}: {name}, {city} ({iso})"


@tool
def institution(institution_no: int) -> str:
    """A partner institution's name, city and country code, by its number."""
    found = _rows("SELECT inst_id, inst_nm, cty, ctry_iso FROM inst WHERE inst_id = ?", institution_no)
    if not found:
        raise KeyError(institution_no)
    no, name, city, iso = found[0]
    return f"institution {no}: {name}, {city} ({iso})"


@tool
def loans_with_institution(institution_no: int) -> str:
    """The loan agreements with an institution, by its number: reference, direction, accession number, dates
    and fee."""
    found = _rows("SELECT agr_ref, dir, inv_ref, dep_dt, ret_dt, fee_eur FROM ln_agr WHERE inst_id = ? "
                  "ORDER BY dep_dt", institution_no)
    lines = [f"{ref}: {way}, object {acc}, {out} to {back}, fee {fee} EUR" for ref, way, acc, out, back, fee in found]
    return "\\n".join(lines) + f"\\n({len(found)} loan agreements)"


@tool
def condition_reports(agreement_ref: str) -> str:
    """The condition reports of a loan agreement, by its reference: stage (pre or post), grade and examiner."""
    found = _rows("SELECT stage, cond_gr, examiner FROM cond_rpt WHERE agr_ref = ? ORDER BY rpt_no",
                  agreement_ref.strip().upper())
    if not found:
        raise KeyError(agreement_ref)
    return "\\n".join(f"{stage}-loan: grade {grade}, examined by {who}" for stage, grade, who in found)


@tool
def distinct_values(table: str, column: str) -> str:
    """The distinct values of a column of a table (inst, obj_reg, ln_agr or cond_rpt)."""
    with sqlite3.connect(f"file:{DB}?mode=ro", uri=True) as conn:
        found = conn.execute(f"SELECT DISTINCT {column} FROM {table} ORDER BY 1").fetchall()
    return "\\n".join(str(value) for value, in found)
'''

_MOST_LENT = "SELECT inv_ref FROM ln_agr WHERE dir = 'OUT' GROUP BY inv_ref ORDER BY count(*) DESC LIMIT 1"
_TOP_FEE_INST = "SELECT inst_id FROM ln_agr ORDER BY fee_eur DESC LIMIT 1"
_JUG_LAST = ("SELECT l.agr_ref FROM ln_agr l JOIN obj_reg o ON o.inv_ref = l.inv_ref WHERE o.ttl = 'Blue Jug' "
             "ORDER BY l.dep_dt DESC LIMIT 1")

QUESTIONS = [
    Question("count", "How many objects are in the museum's register?", "SELECT count(*) FROM obj_reg", "count"),
    Question("filter", "How many loan agreements were for the museum lending its own objects out to others?",
             "SELECT count(*) FROM ln_agr WHERE dir = 'OUT'", "filter"),
    Question("filter-bronze", "How many of the museum's objects are bronzes?",
             "SELECT count(*) FROM obj_reg WHERE medm = 'BRZ'", "filter"),
    Question("lookup", "Who made the object titled 'The Salt Marsh'?",
             "SELECT mkr FROM obj_reg WHERE ttl = 'The Salt Marsh'", "lookup"),
    Question("lookup-city", "In which city is the Hallwyl Gallery?",
             "SELECT cty FROM inst WHERE inst_nm = 'Hallwyl Gallery'", "lookup"),
    Question("argmax", "Which object in the register is insured for the highest value? Give its title.",
             "SELECT ttl FROM obj_reg ORDER BY ins_val_k DESC LIMIT 1", "argmax"),
    Question("join", "What is the total of the fees, in euros, on all loan agreements with the Fenwick Art Trust?",
             "SELECT sum(l.fee_eur) FROM ln_agr l JOIN inst i ON i.inst_id = l.inst_id "
             "WHERE i.inst_nm = 'Fenwick Art Trust'", "join"),
    Question("chain-count", "How many loan agreements, in either direction, has 'Harbour at Dusk' been part of?",
             "SELECT count(*) FROM ln_agr l JOIN obj_reg o ON o.inv_ref = l.inv_ref WHERE o.ttl = 'Harbour at Dusk'",
             "chain", tools="api"),
    Question("chain-flaky", "Of all the loan agreements for 'Portrait of a Lacemaker', the one with the highest fee "
             "was with an institution in which city?",
             "SELECT i.cty FROM ln_agr l JOIN obj_reg o ON o.inv_ref = l.inv_ref JOIN inst i ON i.inst_id = l.inst_id "
             "WHERE o.ttl = 'Portrait of a Lacemaker' ORDER BY l.fee_eur DESC LIMIT 1", "chain", tools="api",
             fault="flaky"),
    Question("chain-noisy", "What condition grade did 'Blue Jug' get in the report after its most recent loan?",
             f"SELECT cond_gr FROM cond_rpt WHERE stage = 'post' AND agr_ref = ({_JUG_LAST})", "chain",
             tools="api", fault="noisy"),
    Question("mcp-unavailable", "How many loan agreements has the museum had with the Whitcombe Museum?",
             "SELECT count(*) FROM ln_agr l JOIN inst i ON i.inst_id = l.inst_id WHERE i.inst_nm = 'Whitcombe Museum'",
             "chain", tools="mcp", fault="unavailable"),
    Question("mcp-refused", "What is the accession number of 'Still Life with Quinces'?",
             "SELECT inv_ref FROM obj_reg WHERE ttl = 'Still Life with Quinces'", "lookup", tools="mcp",
             fault="refused"),
    Question("plan-lent", "Which object has the museum lent out most often, and who made it?",
             [f"SELECT ttl FROM obj_reg WHERE inv_ref = ({_MOST_LENT})",
              f"SELECT mkr FROM obj_reg WHERE inv_ref = ({_MOST_LENT})"], "composite", loop="plan"),
    Question("plan-fee", "Which institution was party to the loan agreement with the highest fee, and in which city "
             "is it?",
             [f"SELECT inst_nm FROM inst WHERE inst_id = ({_TOP_FEE_INST})",
              f"SELECT cty FROM inst WHERE inst_id = ({_TOP_FEE_INST})"], "composite", loop="plan"),
]
