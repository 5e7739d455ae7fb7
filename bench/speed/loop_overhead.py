"""Per-iteration overhead of `refine` with a zero-latency scripted model, and the cost of `import reflexa`.

    .venv/bin/python bench/speed/loop_overhead.py [--iterations 2000] [--repeats 5] [--telemetry off|on|both]
                                                  [--clock wall|cpu] [--writer direct|tracer] [--processor batch|drop]

Side by side on the same machine: the bare-Python reference loop from FACTS.md (one SQLite commit per
step under synchronous=FULL), so the figures can be read as ratios. Targets: <= 350 µs per iteration with
the SQLite store on; `import reflexa` <= 150 ms.

With `--telemetry both` (the default when the `otel` and `metrics` extras are installed) each case also
runs with OpenTelemetry spans (BatchSpanProcessor into an exporter that drops them: the in-process cost,
not a network's) and Prometheus metrics on, alternating with the plain run, and prints the difference
of the medians, the median of the paired differences (each run against the one without telemetry right
before it, which a drifting machine speed moves alike), and the time spent inside the telemetry observers
(measured in the loop: the steadier figure on a busy machine). Target: at most 50 µs more per iteration.
The last line says how fast the machine ran Python (a busy machine slows the loop more than it slows that
probe: it shows load, it does not correct for it).
"""

from __future__ import annotations

import argparse
import gc
import random
import sqlite3
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reflexa import Budget, MemoryStore, ScriptedModel, Session, Signal, SQLiteStore, refine
from reflexa.types import ErrorCode


def word(rng: random.Random) -> str:
    # Letters only: fingerprints fold digits, and each failure must look new or the loop stops early.
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(12))


class NeverPasses:
    """Fails every candidate with a fresh message, so the loop runs to max_iterations. The messages are
    made before the clock starts, so the benchmark times the loop, not itself."""

    name, subjective = "bench", False

    def __init__(self, iterations: int) -> None:
        rng = random.Random(1)
        self.signals = iter(
            [Signal("bench", False, ErrorCode.TEST_FAILED, f"miss {word(rng)}", score=0.5) for _ in range(iterations)]
        )

    def run(self, candidate: str, context: object) -> Signal:
        return next(self.signals)


_TELEMETRY = None
INSIDE: list[float] = []
"""µs per iteration spent inside the telemetry observers, one entry per observed run."""
PROCESSOR = "batch"
"""`batch`: spans queued for export in batches, as `REFLEXA_OTEL=1` sets up; `drop`: each span dropped as it
ends, which shows what keeping spans for the export batch costs the loop."""
WRITER = "direct"
"""`direct`: spans straight to reflexa's own BatchSpanProcessor, as `REFLEXA_OTEL=1` sets up; `tracer`:
through an SDK TracerProvider's tracer, as with an application's own provider."""


class Timed:
    """An observer that adds up the time spent inside another: the telemetry's own share of an iteration,
    measured inside the loop (the shim itself costs about 0.1 µs a call)."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0
        self.tokens = getattr(inner, "tokens", True)  # telemetry reads no tokens: the calls do not stream
        self.reads = getattr(inner, "reads", None)  # nor "call" and "status" events: the run does not send them

    def __call__(self, event, data):
        started = time.perf_counter()
        self.inner(event, data)
        self.seconds += time.perf_counter() - started


def python_speed_ms() -> float:
    """CPU ms for two million integer additions: how fast this machine runs Python right now, so figures
    from a busy machine can be scaled (about 60-80 ms on an idle modern x86 core, Python 3.11)."""
    best = float("inf")
    for _ in range(3):
        started, x = time.process_time(), 0
        for i in range(2_000_000):
            x += i
        best = min(best, time.process_time() - started)
    return best * 1000


def telemetry():
    """One Tracing + Metrics observer per process, as `REFLEXA_OTEL=1 REFLEXA_METRICS=1` would attach."""
    global _TELEMETRY
    if _TELEMETRY is None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
        from prometheus_client import CollectorRegistry

        from reflexa.observe import Metrics, Tracing, observers

        class Dropped(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        from opentelemetry.sdk.trace import SpanProcessor

        processor = BatchSpanProcessor(Dropped()) if PROCESSOR == "batch" else SpanProcessor()
        if WRITER == "direct":
            tracing = Tracing(processor=processor, content=False)
        else:
            provider = TracerProvider()
            provider.add_span_processor(processor)
            tracing = Tracing(provider, content=False)
        _TELEMETRY = Timed(observers(tracing, Metrics(CollectorRegistry())))
    return _TELEMETRY


def telemetry_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("opentelemetry.sdk", "prometheus_client"))


CLOCK = time.perf_counter
"""Wall clock by default; `--clock cpu` reads the process's CPU time (all its threads, the span exporter's
too), which a busy machine disturbs less than it does wall time."""


def time_refine(iterations: int, store_kind: str, reflect: bool, observed: bool = False) -> float:
    rng = random.Random(0)
    replies: list = []
    for _ in range(iterations):
        replies.append(f"Plan: go\n```\n{word(rng)}\n```")
        if reflect:
            replies.append(
                {
                    "failure_step": "attempt",
                    "observed_mismatch": f"miss {word(rng)}",
                    "root_cause": word(rng),
                    "correction": word(rng),
                }
            )
    model = ScriptedModel(replies)
    observer = telemetry() if observed else None
    if observer is not None:
        observer.seconds = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        store = {"sqlite": lambda: SQLiteStore(Path(tmp) / "b.db"), "memory": MemoryStore}[store_kind]()
        check = NeverPasses(iterations)
        # Each run starts from the same collector state: one full collection left over from the run before
        # (tens of ms on this heap) would land on whichever run came next, on or off, as noise.
        gc.collect()
        started = CLOCK()
        result = refine(
            "bench task",
            [check],
            budget=Budget(max_reflections=iterations if reflect else 0),
            session=Session(model=model, store=store, observer=observer),
            max_attempts=iterations,
        )
        elapsed = CLOCK() - started
    assert result.iterations == iterations, result.stop_reason
    if observer is not None:
        INSIDE.append(observer.seconds / iterations * 1e6)
    return elapsed / iterations * 1e6


def time_reference(iterations: int, steps_per_iteration: int) -> float:
    """FACTS.md's reference: a plain loop with one fully-synced SQLite commit per step."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "r.db", isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE s (i INTEGER, payload TEXT)")
        started = time.perf_counter()
        for i in range(iterations):
            for _ in range(steps_per_iteration):
                db.execute("INSERT INTO s VALUES (?, ?)", (i, "x" * 200))
        return (time.perf_counter() - started) / iterations * 1e6


def import_ms(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import time; t = time.perf_counter(); import reflexa; print((time.perf_counter() - t) * 1000)",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--telemetry", choices=("off", "on", "both"), default=None,
                        help="without, with, or alternately without and with spans and metrics "
                        "(default: both when the otel and metrics extras are installed, else off)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time refine by the wall clock or by the process's CPU time")
    parser.add_argument("--writer", choices=("direct", "tracer"), default="direct",
                        help="spans straight to reflexa's own processor (REFLEXA_OTEL=1), or through a "
                        "TracerProvider's tracer (an application's own provider)")
    parser.add_argument("--processor", choices=("batch", "drop"), default="batch",
                        help="spans queued for export in batches (REFLEXA_OTEL=1), or each dropped as it ends")
    args = parser.parse_args()
    global CLOCK, WRITER, PROCESSOR
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    WRITER, PROCESSOR = args.writer, args.processor
    mode = args.telemetry or ("both" if telemetry_installed() else "off")
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[mode]
    header = {"off": "off", "on": "otel+metrics"}
    print(f"{'case':40s}" + "".join(f"{header['on' if m else 'off'] + ' µs/it':>20s}" for m in modes)
          + (f"{'difference µs/it':>20s}{'paired diff.':>16s}" if len(modes) == 2 else "")
          + (f"{'inside observers':>18s}" if True in modes else ""))
    for m in modes:  # warm-up: imports, pydantic adapters, the span processor's thread
        time_refine(20, "memory", True, observed=m)
    for store in ("sqlite", "memory"):
        for reflect in (False, True):
            runs: dict[bool, list[float]] = {m: [] for m in modes}
            INSIDE.clear()
            for _ in range(args.repeats):
                for m in modes:  # alternated, so a busy spell on the machine hits both alike
                    runs[m].append(time_refine(args.iterations, store, reflect, observed=m))
            medians = [statistics.median(runs[m]) for m in modes]
            line = f"{f'refine, {store} store, reflect={reflect}':40s}" + "".join(f"{x:20.0f}" for x in medians)
            if len(medians) == 2:
                # Also the median of paired differences (each on-run against the off-run right before it): a
                # machine whose speed drifts over the minutes of a case moves both halves of a pair alike.
                paired = statistics.median(on - off for off, on in zip(runs[False], runs[True], strict=True))
                line += f"{medians[1] - medians[0]:+20.0f}{paired:+16.0f}"
            if INSIDE:
                line += f"{statistics.median(INSIDE):18.1f}"
            print(line)
    reference = statistics.median(time_reference(args.iterations, 1) for _ in range(min(args.repeats, 5)))
    print(f"{'reference (FACTS.md): bare loop, one FULL-synced commit per step':66s} {reference:14.0f} µs/it")
    print(
        f"{'import reflexa (median of ' + str(min(args.repeats, 5) * 2) + ' fresh processes), ms':66s} "
        f"{import_ms(min(args.repeats, 5) * 2):14.1f}"
    )
    print(f"{'python speed: 2,000,000 integer additions, CPU ms (idle: ~60-80)':66s} {python_speed_ms():14.0f}")


if __name__ == "__main__":
    main()
