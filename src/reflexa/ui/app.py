"""The trace viewer's web app: server-rendered pages over the read-only store, and a live feed per run.

Every page is rendered by Jinja2 with autoescaping on, so model text (candidates, thoughts, tool output,
evidence) is shown as text: a candidate holding `<script>` displays those characters and runs nothing.
A Content-Security-Policy that allows only the app's own script and style files is a second guard.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..reflect.experience import NAMESPACE as EXPERIENCE
from ..reflect.experience import Entry
from ..reflect.governor import NAMESPACE as GOVERNOR
from ..reflect.governor import Governor, Stats, wilson_upper
from ..tools.approval import waiting
from ..trace.store import RunRecord
from ..types import StopReason, Usage
from .charts import Bar, Point, bar_chart, scatter_chart
from .store import SORTS, ReadOnlyStore
from .views import Timeline, citations, clip, usage_of

HERE = Path(__file__).parent
POLL_SECONDS = 0.5
"""How often a live feed looks for new steps in the store."""
KEEPALIVE_SECONDS = 15.0
"""A live feed with nothing new sends a comment this often, so proxies and browsers keep it open."""
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
"""Host headers accepted when serving on a loopback address: a page elsewhere that points its own domain
at 127.0.0.1 (DNS rebinding) cannot read the trace."""

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP response. Plain ASGI, so a live feed streams untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def _secs(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def environment() -> Environment:
    """The Jinja2 environment: autoescaping on for every template, undefined names an error."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=_when, secs=_secs, clip=clip,
                       js=lambda value: json.dumps(value, ensure_ascii=False, default=str, indent=1))
    env.globals.update(stop_reasons=[r.value for r in StopReason])
    return env


def create_app(trace: str | Path, *, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The viewer for the store at `trace`, opened read-only (a StoreError when it cannot be).
    `allowed_hosts` limits the Host header (None: any, for tests and a deliberate --host)."""
    store = ReadOnlyStore(trace)
    app = FastAPI(title="reflexa trace viewer", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    pages = Pages(store, environment())
    _run_routes(app, pages)
    _engine_routes(app, pages)
    _eval_routes(app, pages)
    _metrics_route(app)
    wrapped: Any = SecurityHeaders
    app.add_middleware(wrapped)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    return app


@dataclass(frozen=True, slots=True)
class Pages:
    """The store the pages read and the templates they render with."""

    store: ReadOnlyStore
    env: Any

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(trace=str(self.store.path), **context),
                            status_code=status_code)

    def not_found(self, what: str) -> HTMLResponse:
        return self.page("error.html", 404, title="not found", message=what)


def _run_routes(app: FastAPI, pages: Pages) -> None:
    """The runs list, a run's page, a step's JSON and a live run's events."""
    store = pages.store

    @app.get("/", response_class=HTMLResponse)
    def runs_page(loop: str = "", status: str = "", model: str = "", q: str = "", sort: str = "started",
                  order: str = "desc", limit: int = 200) -> HTMLResponse:
        sort = sort if sort in SORTS else "started"
        descending = order != "asc"
        rows = store.search_runs(loop=loop or None, status=status or None, model=model or None, text=q.strip() or None,
                                 sort=sort, descending=descending, limit=limit)
        filters = {"loop": loop, "status": status, "model": model, "q": q}
        return pages.page("runs.html", title="runs", rows=rows, filters=filters, choices=store.choices(), sort=sort,
                          descending=descending, limit=limit, query={k: v for k, v in filters.items() if v})

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(run_id: str) -> HTMLResponse:
        record = store.get_run(run_id)
        if record is None:
            return pages.not_found(f"no run has the id {run_id!r} (nor starts with it alone)")
        steps = store.steps(record.run_id)
        usage = usage_of(record, store.usage_by_role(record.run_id))
        live = record.status == "running"
        return pages.page("run.html", title=f"run {record.run_id[:12]}", run=record,
                          items=Timeline(record).items(steps), usage=usage, total=Usage.total(usage.values()),
                          usage_chart=_usage_chart(usage), citations=citations(record, steps), live=live,
                          alive=live and store.live(record.run_id), last_step=steps[-1].step_id if steps else 0,
                          duration=(record.ended_at or time.time()) - record.started_at, result=record.result or {},
                          waiting=waiting(store, record.run_id) if record.status == "awaiting" else [])

    @app.get("/runs/{run_id}/steps/{step_id}.json")
    def step_json(run_id: str, step_id: int) -> Response:
        record = store.get_run(run_id)
        found = [s for s in store.steps(record.run_id) if s.step_id == step_id] if record else []
        if not found:
            return JSONResponse({"error": f"no step {step_id} in run {run_id!r}"}, status_code=404)
        return JSONResponse(json.loads(json.dumps(found[0].to_dict(), default=str)))

    @app.get("/runs/{run_id}/events")
    async def run_events(request: Request, run_id: str, after: int = 0,
                         last_event_id: str | None = Header(None)) -> Response:
        record = await run_in_threadpool(store.get_run, run_id)
        if record is None:
            return PlainTextResponse(f"no run {run_id!r}", status_code=404)
        if last_event_id and last_event_id.isdigit():  # the browser reconnected: carry on after what it has
            after = max(after, int(last_event_id))
        return StreamingResponse(_feed(request, store, pages.env, record, after), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def _engine_routes(app: FastAPI, pages: Pages) -> None:
    """The experience library's and the governor's pages."""
    store = pages.store

    @app.get("/experience", response_class=HTMLResponse)
    def experience_page() -> HTMLResponse:
        entries = sorted((Entry(**data) for _, data in store.items(EXPERIENCE)), key=lambda e: -e.last_used)
        top = sorted(entries, key=lambda e: -(e.hits + e.successes + e.failures))[:12]
        chart = bar_chart([Bar(e.lesson.get("correction", e.fingerprint), [(e.successes, "ok"), (e.failures, "bad"),
                                                                          (max(0, e.hits - e.successes - e.failures),
                                                                           "muted")],
                               text=f"{e.hits} hits, {e.successes}✓ {e.failures}✗") for e in top],
                          title="experience entries: successes, failures and untried hits")
        return pages.page("experience.html", title="experience", entries=entries, chart=chart)

    @app.get("/governor", response_class=HTMLResponse)
    def governor_page() -> HTMLResponse:
        defaults = Governor(store)
        rows = [GovernorRow.of(key, data, defaults) for key, data in store.items(GOVERNOR)]
        chart = bar_chart([Bar(f"{r.family} · {r.model}", [(r.rate or 0.0, "ok")], marker=r.upper,
                               text=f"{r.stats.conversions}/{r.stats.samples}, upper {r.upper:.0%}") for r in rows],
                          title="conversion rate of reflected retries (tick: 95% upper bound)", scale=1.0)
        return pages.page("governor.html", title="governor", rows=rows, chart=chart, min_samples=defaults.min_samples,
                          min_rate=defaults.min_rate)


@dataclass(frozen=True, slots=True)
class GovernorRow:
    """One model and task family in the governor's record, with what the governor makes of it."""

    model: str
    family: str
    stats: Stats
    rate: float | None
    upper: float
    """The 95% upper bound on the conversion rate."""
    cutting: bool
    """Whether a governor at its default settings cuts retries here."""

    @classmethod
    def of(cls, key: str, data: dict[str, Any], governor: Governor) -> GovernorRow:
        stats = Stats(**{k: v for k, v in data.items() if k in Stats.__dataclass_fields__})
        model, _, family = key.partition("|")
        upper = wilson_upper(stats.conversions, stats.samples)
        return cls(model, family, stats, stats.conversions / stats.samples if stats.samples else None, upper,
                   stats.samples >= governor.min_samples and upper < governor.min_rate)


def _eval_routes(app: FastAPI, pages: Pages) -> None:
    """The evals list and one eval's report: its table, the Pareto chart, the task × strategy grid."""
    from ..eval.report import cell, columns, comparison_line, summarise
    from ..eval.runner import EVALS, namespace

    store = pages.store

    @app.get("/evals", response_class=HTMLResponse)
    def evals_page() -> HTMLResponse:
        evals = sorted(store.items(EVALS), key=lambda item: -float(item[1].get("updated", 0)))
        counts = {ident: len(store.items(namespace(ident))) for ident, _ in evals}
        return pages.page("evals.html", title="evals", evals=evals, counts=counts)

    @app.get("/evals/{eval_id}", response_class=HTMLResponse)
    def eval_page(eval_id: str) -> HTMLResponse:
        header = store.get(EVALS, eval_id)
        if header is None:
            return pages.not_found(f"no eval has the id {eval_id!r}")
        names = list(header.get("strategies", []))
        rows = [row for _, row in store.items(namespace(eval_id)) if row.get("strategy") in names]
        report = summarise(rows, names)
        chart = scatter_chart([Point(name, s["tokens_per_task"] or 0.0, s["solved"])
                               for name, s in report["strategies"].items() if s["tasks"]],
                              title="solved against tokens per task", x_label="tokens per task", y_label="solved")
        grid: dict[str, dict[str, Any]] = {}
        for row in rows:
            grid.setdefault(row["task"], {})[row["strategy"]] = row
        return pages.page("eval.html", title=f"eval {eval_id}", eval_id=eval_id, header=header, names=names,
                          report=report, chart=chart, grid=grid, cell=cell,
                          columns=[(key, label.replace("\n", " ")) for key, label in columns(report)],
                          comparisons=[comparison_line(c) for c in report["comparisons"]])


def _metrics_route(app: FastAPI) -> None:
    """/metrics: Prometheus series rebuilt from the store on each scrape (the runs the viewer shows ran in
    other processes), when prometheus_client is installed."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    except ImportError:

        @app.get("/metrics")
        def no_metrics() -> PlainTextResponse:
            return PlainTextResponse("metrics need the prometheus-client package: pip install prometheus-client\n",
                                     status_code=404)

        return
    from ..observe.metrics import from_store

    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        return Response(generate_latest(from_store(request.app.state.store)), media_type=CONTENT_TYPE_LATEST)


def _usage_chart(usage: dict[str, Usage]) -> Any:
    return bar_chart([Bar(role, [(u.input_tokens, "input"), (u.output_tokens, "output")],
                          text=f"{u.input_tokens} in + {u.output_tokens} out, {u.calls} call(s)")
                      for role, u in usage.items()], title="tokens per role: input and output")


async def _feed(request: Request, store: ReadOnlyStore, env: Environment, record: RunRecord,
                after: int) -> AsyncIterator[str]:
    """Server-sent events: each new step as rendered HTML (`step`), then `end` once the run is over."""
    template = env.get_template("step.html")
    timeline = Timeline(record)
    for step in await run_in_threadpool(store.steps, record.run_id):
        if step.step_id > after:
            break
        timeline.item(step)  # remembers the last candidate, for the next attempt's diff
    yield "retry: 2000\n\n"
    last, quiet = after, 0.0
    while not await request.is_disconnected():
        # The status before the steps: a run is marked over only after its last step is stored, so the steps
        # read next include them all (read the other way round, the last ones could be missed).
        current = await run_in_threadpool(store.get_run, record.run_id)
        for step in await run_in_threadpool(store.steps_after, record.run_id, last):
            html = template.render(item=timeline.item(step), run=record)
            yield f"id: {step.step_id}\nevent: step\ndata: {json.dumps({'id': step.step_id, 'html': html})}\n\n"
            last, quiet = step.step_id, 0.0
        if current is None or current.status != "running":
            end = {"status": current.status if current else "gone",
                   "stop_reason": current.stop_reason if current else None}
            yield f"event: end\ndata: {json.dumps(end)}\n\n"
            return
        if quiet >= KEEPALIVE_SECONDS:
            yield ": keep-alive\n\n"
            quiet = 0.0
        await asyncio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS
