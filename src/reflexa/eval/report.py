"""An eval's report: per strategy, what it solved and at what cost; for each strategy against each
baseline, the paired difference on the same tasks with its exact McNemar p-value."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .stats import mcnemar


def is_baseline(name: str) -> bool:
    """The strategies others are compared against by default: one attempt, and fresh resampling."""
    return name == "single" or name.startswith("resample@")


def summarise(rows: Iterable[dict[str, Any]], strategies: list[str],
              baselines: list[str] | None = None) -> dict[str, Any]:
    """The report as plain data (what --json prints)."""
    rows = list(rows)
    by = {name: {row["task"]: row for row in rows if row["strategy"] == name} for name in strategies}
    baselines = [b for b in (baselines if baselines is not None else [s for s in strategies if is_baseline(s)])
                 if b in by]
    return {
        "tasks": len({row["task"] for row in rows}),
        "strategies": {name: _strategy(list(by[name].values())) for name in strategies},
        # two strategies that share no task (a mixed dataset: a react strategy and a refine one) are not compared
        "comparisons": [c for name, base in pairs(strategies, baselines)
                        if (c := _compare(name, base, by[name], by[base]))["tasks"]],
    }


def pairs(strategies: list[str], baselines: list[str]) -> list[tuple[str, str]]:
    """(strategy, baseline) pairs to compare: every other strategy against each baseline, except that a
    baseline is compared only with the first baseline (resample@3 against single), and a budget-matched
    resample (resample@=NAME) only with NAME, the strategy whose cost it matches."""
    out = []
    for base in baselines:
        for name in strategies:
            if name == base or (name in baselines and base != baselines[0]):
                continue
            if base.startswith("resample@=") and name != base.removeprefix("resample@="):
                continue
            out.append((name, base))
    return out


def _strategy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    solved = sum(bool(r["passed"]) for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    firsts = [r for r in rows if r.get("first_passed") is not None]
    return {
        "tasks": len(rows),
        "solved": solved,
        "first_solved": sum(bool(r["first_passed"]) for r in firsts) if firsts else None,
        "fail_to_pass": sum(r["passed"] and not r["first_passed"] for r in firsts) if firsts else None,
        "pass_to_fail": sum(r["first_passed"] and not r["passed"] for r in firsts) if firsts else None,
        "visible_passed": sum(bool(r["visible"]) for r in rows),
        "visible_not_solved": sum(r["visible"] and not r["passed"] for r in rows),
        "errors": sum(r["stop_reason"] == "ERROR" for r in rows),
        "tokens_per_task": round(tokens / len(rows), 1) if rows else None,
        "tokens_per_solved": round(tokens / solved, 1) if solved else None,
        "calls_per_task": round(sum(r["calls"] for r in rows) / len(rows), 2) if rows else None,
        "seconds_per_solved": round(seconds / solved, 2) if solved else None,
        **_compute([r.get("tflops") for r in rows], solved),
        **_citations([r["citations"] for r in rows if r.get("citations")]),
    }


def _compute(tflops: list[float | None], solved: int) -> dict[str, Any]:
    """Compute per task and per solved task (TFLOP), when every row knows its models' sizes."""
    if not tflops or any(t is None for t in tflops):
        return {}
    total = sum(t for t in tflops if t is not None)
    return {"tflops_per_task": round(total / len(tflops), 3),
            "tflops_per_solved": round(total / solved, 3) if solved else None}


def _citations(found: list[dict[str, int]]) -> dict[str, Any]:
    """Citation precision (right / cited) and recall (right / gold) over the rows whose score lists citations;
    nothing when none does."""
    if not found:
        return {}
    right, cited, gold = (sum(c[key] for c in found) for key in ("right", "cited", "gold"))
    return {"citations": {"right": right, "cited": cited, "gold": gold},
            "citation_precision": round(right / cited, 2) if cited else None,
            "citation_recall": round(right / gold, 2) if gold else None}


def _compare(name: str, base: str, rows: dict[str, dict[str, Any]], base_rows: dict[str, dict[str, Any]]
             ) -> dict[str, Any]:
    """`name` against `base` on the tasks both have a row for."""
    shared = sorted(set(rows) & set(base_rows))
    only_base = sum(base_rows[t]["passed"] and not rows[t]["passed"] for t in shared)
    only_this = sum(rows[t]["passed"] and not base_rows[t]["passed"] for t in shared)
    tokens = sum(rows[t]["tokens"] for t in shared)
    base_tokens = sum(base_rows[t]["tokens"] for t in shared)
    return {"strategy": name, "baseline": base, "tasks": len(shared), "difference": only_this - only_base,
            "only_strategy": only_this, "only_baseline": only_base, "p_value": round(mcnemar(only_base, only_this), 4),
            "token_ratio": round(tokens / base_tokens, 2) if base_tokens else None}


COLUMNS = (("solved", "solved"), ("first_solved", "1st"), ("fail_to_pass", "f→p"), ("pass_to_fail", "p→f"),
           ("visible_not_solved", "visible\nonly"), ("tokens_per_task", "tokens\n/task"),
           ("tokens_per_solved", "tokens\n/solved"), ("calls_per_task", "calls\n/task"),
           ("seconds_per_solved", "s\n/solved"))
"""The report's columns: solved (by the score), solved by the first attempt, fail→pass and pass→fail against
that first attempt, passed the visible checks but not the score, tokens per task and per solved task, model
calls per task, wall seconds per solved task."""
FIRST_ATTEMPT = ("first_solved", "fail_to_pass", "pass_to_fail")
"""refine's columns: the first attempt's outcome and what the later attempts changed."""
COMPUTE_COLUMNS = (("tflops_per_task", "TFLOP\n/task"), ("tflops_per_solved", "TFLOP\n/solved"))
"""Added when every row knows its models' sizes: 2 × parameters × tokens, summed over the roles' models."""
CITATION_COLUMNS = (("citation_precision", "cite\nprecision"), ("citation_recall", "cite\nrecall"))
"""Added when the tasks' scores list citations: right / cited (with the counts), right / gold."""


def columns(report: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The report's columns: COLUMNS (without the first attempt's when no strategy ran a refine task),
    COMPUTE_COLUMNS when a strategy has compute figures, and CITATION_COLUMNS when one has citation figures."""
    strategies = report["strategies"].values()
    firsts = any(s["first_solved"] is not None for s in strategies)
    flops = any("tflops_per_task" in s for s in strategies)
    cites = any("citations" in s for s in strategies)
    return tuple(column for column in COLUMNS if firsts or column[0] not in FIRST_ATTEMPT) + (
        COMPUTE_COLUMNS if flops else ()) + (CITATION_COLUMNS if cites else ())


def cell(s: dict[str, Any], key: str) -> str:
    """One strategy's figure as the report shows it: a dash for none, a precision with its counts."""
    value = s.get(key)
    if key == "citation_precision" and "citations" in s:
        return f"{_cell(value)} ({s['citations']['right']}/{s['citations']['cited']})"
    return _cell(value)


def _cell(value: Any) -> str:
    return "–" if value is None else str(value)


def comparison_line(c: dict[str, Any]) -> str:
    sign = "+" if c["difference"] > 0 else ""
    return (f"{c['strategy']} vs {c['baseline']}: {sign}{c['difference']} of {c['tasks']} "
            f"({c['only_strategy']} solved only by {c['strategy']}, {c['only_baseline']} only by {c['baseline']}), "
            f"exact McNemar p {_p(c['p_value'])}, tokens ×{_cell(c['token_ratio'])}")


def _p(value: float) -> str:
    """`= P`, or `< 0.0001` where the report's four decimals round P to zero."""
    return f"= {value:.3g}" if value else "< 0.0001"


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table and a list of comparisons."""
    shown = columns(report)
    head = "| strategy | tasks | " + " | ".join(label.replace("\n", " ") for _, label in shown) + " |"
    lines = [head, "|" + " --- |" * (len(shown) + 2)]
    for name, s in report["strategies"].items():
        lines.append(f"| {name} | {s['tasks']} | " + " | ".join(cell(s, key) for key, _ in shown) + " |")
    if report["comparisons"]:
        lines += ["", *[f"- {comparison_line(c)}" for c in report["comparisons"]]]
    return "\n".join(lines) + "\n"


def table(report: dict[str, Any]) -> Any:
    """The report as a rich Table (the comparisons are printed under it)."""
    from rich import box
    from rich.table import Table

    out = Table(title=f"{report['tasks']} task(s)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                collapse_padding=True)
    out.add_column("strategy", style="bold", overflow="fold", min_width=12)
    shown = columns(report)
    for _, label in shown:
        out.add_column(label, justify="right", no_wrap=True)
    for name, s in report["strategies"].items():
        out.add_row(name, *[cell(s, key) for key, _ in shown])
    return out
