"""The viewer's window on the trace: the CLI's SQLite store, opened read-only (`ReadOnlySQLiteStore`), so
the viewer never writes to it. The database file itself is never changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..trace.sqlite import ReadOnlySQLiteStore
from ..trace.store import Lease, RunRecord
from ..types import Step, Usage

SORTS = {
    "started": "started_at",
    "loop": "loop",
    "status": "COALESCE(stop_reason, status)",
    "model": "model",
    "tokens": "tokens",
    "duration": "duration",
    "steps": "steps",
}
"""Columns the runs list sorts by (query parameter -> SQL expression)."""
MAX_RUNS = 1000
"""Rows the runs list shows at most, whatever `limit` asks."""


@dataclass(slots=True)
class RunRow:
    """One line of the runs list."""

    record: RunRecord
    model: str
    tokens: int
    steps: int
    duration: float
    """Seconds from start to end; for a run still going, to now."""
    live: bool
    """A running run whose process still holds its lease (False: finished, or killed while running)."""
    child: bool = False
    """A run of a plan's sub-goal or of a trial, listed under its parent run."""


class ReadOnlyStore(ReadOnlySQLiteStore):
    """The trace store opened read-only (see ReadOnlySQLiteStore), with the queries the viewer asks."""

    # --- what the viewer asks ---------------------------------------------------------------------------

    def search_runs(self, *, loop: str | None = None, status: str | None = None, model: str | None = None,
                    text: str | None = None, sort: str = "started", descending: bool = True,
                    limit: int = 200) -> list[RunRow]:
        """Runs matching every filter given: `status` is the run's status or its stop reason; `text` a
        case-blind part of the task or the start of the run id. Unknown sorts fall back to start time."""
        where: list[str] = ["1"]
        params: list[str | int] = []
        if loop:
            where.append("loop = ?")
            params.append(loop)
        if status:
            where.append("(status = ? OR stop_reason = ?)")
            params += [status, status]
        if model:
            where.append("model = ?")
            params.append(model)
        if text:
            # instr, not LIKE: "%" and "_" in the filter are characters, not wildcards.
            where.append("(instr(lower(task), lower(?)) > 0 OR substr(run_id, 1, ?) = ?)")
            params += [text, len(text), text]
        order = SORTS.get(sort, SORTS["started"])
        sql = f"""
            SELECT * FROM (
                SELECT runs.*, -- json_valid: a row written before non-finite numbers were stored as null
                    CASE WHEN json_valid(meta) THEN COALESCE(json_extract(meta, '$.model'), '') ELSE '' END AS model,
                    -- a finished run's own total (a plan's and a trials run's include their children's),
                    -- else what its stored steps have used so far
                    COALESCE(CASE WHEN json_valid(result)
                                  THEN json_extract(result, '$.total_usage.input_tokens')
                                       + json_extract(result, '$.total_usage.output_tokens') END,
                             (SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM steps s
                              WHERE s.run_id = runs.run_id)) AS tokens,
                    (SELECT COUNT(*) FROM steps s WHERE s.run_id = runs.run_id) AS steps,
                    COALESCE(ended_at, ?) - started_at AS duration
                FROM runs)
            WHERE {' AND '.join(where)}
            ORDER BY {order} {'DESC' if descending else 'ASC'}, started_at DESC LIMIT ?"""
        rows = self._read(sql, (time.time(), *params, max(1, min(limit, MAX_RUNS))))
        return grouped([RunRow(self._record(r), r["model"], r["tokens"], r["steps"], r["duration"],
                               r["status"] == "running" and self.live(r["run_id"])) for r in rows])

    def choices(self) -> dict[str, list[str]]:
        """The values the runs list can filter on: loops, statuses and stop reasons, models."""
        loops = [r[0] for r in self._read("SELECT DISTINCT loop FROM runs ORDER BY loop")]
        statuses = [r[0] for r in self._read(
            "SELECT DISTINCT status FROM runs UNION SELECT DISTINCT stop_reason FROM runs "
            "WHERE stop_reason IS NOT NULL ORDER BY 1")]
        models = [r[0] for r in self._read(
            "SELECT DISTINCT json_extract(meta, '$.model') FROM runs WHERE json_extract(meta, '$.model') IS NOT NULL "
            "ORDER BY 1")]
        return {"loop": loops, "status": statuses, "model": [str(m) for m in models]}

    def steps_after(self, run_id: str, after: int) -> list[Step]:
        """The run's steps numbered above `after`: what a live view has not shown yet."""
        from ..trace.store import step_from_row

        rows = self._read("SELECT * FROM steps WHERE run_id=? AND step_id>? ORDER BY step_id", (run_id, after))
        return [step_from_row(dict(r)) for r in rows]

    def usage_by_role(self, run_id: str) -> dict[str, Usage]:
        """Tokens and calls per role, summed over the stored steps (for a run with no result yet)."""
        rows = self._read("SELECT role, SUM(input_tokens), SUM(output_tokens), SUM(calls) FROM steps "
                          "WHERE run_id=? AND role IS NOT NULL GROUP BY role ORDER BY role", (run_id,))
        return {r[0]: Usage(r[1], r[2], r[3]) for r in rows if r[1] or r[2] or r[3]}

    def live(self, run_id: str) -> bool:
        """Whether a live process holds the run's lease (the run is really going on)."""
        rows = self._read("SELECT * FROM leases WHERE run_id=?", (run_id,))
        return bool(rows) and Lease(**dict(rows[0])).live(time.time(), self.lease_ttl)


def grouped(rows: list[RunRow]) -> list[RunRow]:
    """The rows in their order, each run of a plan's sub-goal or of a trial moved right under its parent
    (when the parent is listed), oldest child first."""
    from ..trace.store import under_parents

    order = under_parents([row.record for row in rows])
    by_id = {row.record.run_id: row for row in rows}
    out = []
    for record, child in order:
        row = by_id[record.run_id]
        row.child = child
        out.append(row)
    return out
