"""`reflexa eval`: strategies side by side on a dataset, at equal cost, with paired statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import ConfigError, StoreError
from .common import clean_errors, console, errors
from .live import hard_exit
from .options import JsonOpt, ModelOpt, ReflectorOpt, TraceOpt, budget_flags, option, with_flags

DatasetArg = Annotated[str, typer.Argument(
    metavar="DATASET", show_default=False,
    help="A JSON Lines file of task specs (each may carry a `score`), or humaneval, humaneval+:PATH, mbpp:PATH, "
         "hotpotqa:PATH.")]


def _eval(
    dataset: DatasetArg,
    strategies: Annotated[str, option("LIST", "Comma-separated strategies (default single,resample@3,refine): "
                                      "single, resample@K[:temperature=T], resample@=NAME (NAME's tokens on each "
                                      "task), LOOP[:key=value...] (refine:reflect=off), and the naive loops "
                                      "test-driven, cookbook, tutorial, reflect-every-step, always-search. "
                                      "docs/eval.md.",
                                      names=("--strategies", "-s"))] = "single,resample@3,refine",
    baselines: Annotated[str | None, option("LIST", "Strategies the others are compared against (default: single "
                                            "and every resample).")] = None,
    ids: Annotated[str | None, option("IDS", "Only these task ids (comma-separated).")] = None,
    skip: Annotated[int, option("N", "Skip the first N tasks.", min=0)] = 0,
    limit: Annotated[int | None, option("N", "At most N tasks (after --skip).", min=1)] = None,
    out: Annotated[Path, option("DIR", "Where the rows (rows.jsonl), the report (report.json) and an adapter's "
                                "dataset go (default eval-out).", names=("--out", "-o"), path=True)] = Path("eval-out"),
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    concurrency: Annotated[int, option("N", "Tasks at once (default 1).", names=("--concurrency", "-c"), min=1,
                                       max=1024)] = 1,
    executor: Annotated[str, option("KIND", "local (threads; processes for the embedded model), threads, "
                                    "processes, async (coroutines on one event loop) or ray.")] = "local",
    address: Annotated[str | None, option("ADDRESS", "A Ray cluster to run on (default: a local Ray).")] = None,
    share_calls: Annotated[bool, option(None, "Strategies on a task share their deterministic model calls, each "
                                        "billed in full (default on; docs/eval.md).",
                                        names=("--share-calls/--no-share-calls",))] = True,
    report_only: Annotated[bool, option(None, "Run nothing: the report of the rows stored so far (an eval still "
                                        "running elsewhere goes on).", names=("--report-only",))] = False,
    as_json: JsonOpt = False,
    as_markdown: Annotated[bool, option(None, "Print the report as a Markdown table.",
                                        names=("--markdown",))] = False,
    trace: TraceOpt = None,
    budget: dict[str, Any] | None = None,
) -> None:
    """Run every strategy on every task of a dataset and compare them: solved (by the task's score), first
    attempt, fail→pass, tokens and seconds, and each against the baselines with an exact McNemar p-value.
    Rows are written as they finish; the same command again resumes (docs/eval.md)."""
    from ..eval import summarise
    from ..trace.sqlite import default_path
    from ..trace.store import trace_env

    with clean_errors():
        _check_flags(out, executor, address)
        path, tasks, chosen, bases = _selected(dataset, strategies, baselines, out, ids, skip, limit,
                                               budget or {})
        store = trace or trace_env() or str(default_path())
        if report_only:
            ident, found = _stored(path, tasks, chosen, store, out, model, reflector_model)
        else:
            state = _run(tasks, chosen, path, store, out, as_json, model=model, reflector_model=reflector_model,
                         concurrency=concurrency, executor=executor, address=address, share_calls=share_calls)
            ident, found = state.ident, state.rows
        report: dict[str, Any] = {"eval": ident, "dataset": dataset, "model": model, "store": store,
                                  "rows": str(out / "rows.jsonl"),
                                  **summarise(found, [s.name for s in chosen], bases)}
        if not report_only:
            (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _show(report, out, as_json, as_markdown)


def _selected(dataset: str, strategies: str, baselines: str | None, out: Path, ids: str | None, skip: int,
              limit: int | None, defaults: dict[str, Any]) -> tuple[Path, list[Any], list[Any], list[str] | None]:
    """The dataset's file, the tasks chosen from it, the strategies and the baselines; every mistake a
    ConfigError."""
    from ..eval import parse_strategies, read_dataset
    from ..eval.dataset import adapt

    chosen = parse_strategies(strategies)
    path = adapt(dataset, out)
    tasks = read_dataset(str(path), out, defaults=defaults, skip=skip, limit=limit,
                         ids=[i.strip() for i in ids.split(",") if i.strip()] if ids else None)
    if not tasks:
        raise ConfigError("no tasks selected", hint="check --skip, --limit and --ids")
    for strategy in chosen:
        if not any(strategy.applies(task.spec) for task in tasks):
            raise ConfigError(f"strategy {strategy.name!r} runs {strategy.loop} tasks, and none is selected",
                              hint="a LOOP:... strategy runs the tasks of that loop; single runs any")
    return path, tasks, chosen, _baselines(baselines, [s.name for s in chosen])


def _check_flags(out: Path, executor: str, address: str | None) -> None:
    """The flags that are wrong on their own, before anything is read or shown."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out must be a folder: {out} is a file")
    from ..executors import KINDS

    if executor not in KINDS:
        raise ConfigError(f"--executor must be one of {', '.join(KINDS)}, not {executor!r}")
    if address is not None and executor != "ray":
        raise ConfigError("--address needs --executor ray")



def _baselines(text: str | None, names: list[str]) -> list[str] | None:
    """--baselines as a list (None: the default ones), every name one of the strategies."""
    if text is None:
        return None
    bases = [b.strip() for b in text.split(",") if b.strip()]
    if unknown := [b for b in bases if b not in names]:
        raise ConfigError(f"--baselines names strategies not in --strategies: {', '.join(unknown)}")
    return bases


def _stored(path: Path, tasks: list[Any], chosen: list[Any], store: str, out: Path, model: str | None,
            reflector_model: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The eval's id and the rows its store and rows file have so far, read without running anything; when
    there are none, a note on stderr names the models of this dataset's other evals in the store."""
    from ..eval.runner import identity, stored_rows
    from .common import open_store

    ident, model, reflector_model = identity(path, model, reflector_model)
    try:
        opened = open_store(store, reader=True)
    except StoreError:
        if not (out / "rows.jsonl").is_file():
            raise
        opened = None  # the rows file alone holds the eval (a checkout of its rows without the store)
    found = stored_rows(tasks, chosen, ident, opened, out / "rows.jsonl")
    if not found and opened is not None:
        _other_models(opened, path, ident, model, reflector_model)
    return ident, found


def _other_models(store: Any, path: Path, ident: str, model: str | None, reflector_model: str | None) -> None:
    """Name the other evals of this dataset in the store: an eval's id includes its models, so a report asked
    without the `--model` the eval ran with finds no rows, and the empty table alone does not say why."""
    from ..eval.runner import EVALS

    asked = f"model {model or 'the default'}, reflector {reflector_model or 'the same'}"
    for other, header in store.items(EVALS):
        if other != ident and header.get("dataset") == str(path):
            flags = f"--model {header['model']}" if header.get("model") else "no --model"
            if header.get("reflector_model"):
                flags += f" --reflector-model {header['reflector_model']}"
            errors.print(f"note: eval {ident} ({asked}) has no rows; eval {other} of this dataset ran with {flags}: "
                         "give the same to report it", highlight=False, markup=False, soft_wrap=True)


def _run(tasks: list[Any], chosen: list[Any], path: Path, store: str, out: Path, as_json: bool,
         **options: Any) -> Any:
    """The eval under a progress bar; Ctrl-C says what is kept and exits 130."""
    from ..eval import run_eval
    from ..executors import Interrupted

    view = None if as_json else EvalView()
    try:
        return run_eval(tasks, chosen, dataset=path, store=store, out=out, progress=view, **options)
    except Interrupted as stop:
        if view:
            view.stop()
        errors.print(f"interrupted: eval {stop.progress.ident}: {stop.progress.done} of {stop.progress.total} "
                     "task(s) done; every finished row is kept. Run the same command again to finish it.",
                     highlight=False)
        hard_exit(stop.exit_code)
    finally:
        if view:
            view.stop()


def _show(report: dict[str, Any], out: Path, as_json: bool, as_markdown: bool) -> None:
    from ..eval.report import comparison_line, markdown, table

    if as_json:
        print(json.dumps(report, indent=2))
    elif as_markdown:
        print(markdown(report), end="")
    else:
        console.print(table(report))
        for comparison in report["comparisons"]:
            console.print(escape(comparison_line(comparison)), highlight=False)
        console.print(f"eval {report['eval']}: rows {out / 'rows.jsonl'}, report {out / 'report.json'}",
                      markup=False, highlight=False)


class EvalView:
    """A progress bar over tasks (each runs every strategy)."""

    def __init__(self) -> None:
        self.progress = Progress(TextColumn("[bold]eval {task.fields[ident]}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("tasks"), TimeElapsedColumn(), console=console, transient=True)
        self.task: Any = None

    def __call__(self, state: Any) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("eval", total=state.total, ident=state.ident)
        self.progress.update(self.task, completed=state.done)

    def stop(self) -> None:
        self.progress.stop()


eval_command = with_flags(_eval, budget_flags("each run whose task sets none"), into="budget")
