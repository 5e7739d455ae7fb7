"""Sessions in one process against an OpenAI-compatible server: throughput at 1, 8 and 32 concurrent sessions.

    .venv/bin/python bench/speed/concurrency.py [--latency 0.2] [--per-session 8] [--levels 1,8,32] [--store sqlite]
                                                [--executor threads|async]

A fake server (a separate process, 127.0.0.1 only) answers every chat completion with a canned reply after
`--latency` seconds. Each task is a `refine` run through `reflexa batch` and the real `openai` backend: one
model call, a regex check, every step in the trace store. `--executor threads` runs each session in a
thread; `--executor async` runs them as coroutines on one event loop (`reflexa.aio`, the SDK's async
client). Throughput is tasks per second; the ratio is against one session, run side by side. Target: 32
sessions >= 25x one session.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPLY = "Plan: say it.\n```\nGOOD\n```"


def serve(port: int, latency: float) -> None:
    """The fake server: /v1/models and /v1/chat/completions, each after `latency` seconds."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real server: no new connection per call

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send({"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "bench"}]})

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(latency)
            self._send({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": REPLY}}],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}})

        def log_message(self, *args) -> None:
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 256
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_level(sessions: int, tasks: int, model: str, folder: Path, store: str, executor: str) -> dict:
    from reflexa.batch import run_batch

    path = folder / f"tasks-{sessions}.jsonl"
    path.write_text("".join(json.dumps({"task": f"say GOOD {i}", "regex": "GOOD"}) + "\n" for i in range(tasks)))
    started = time.perf_counter()
    state = run_batch(path, "refine", store=store, model=model, concurrency=sessions, executor=executor,
                      out=folder / f"results-{sessions}.jsonl")
    seconds = time.perf_counter() - started
    assert state.passed == tasks, f"{state.passed} of {tasks} passed: {state.errors[:3]}"
    return {"sessions": sessions, "tasks": tasks, "seconds": round(seconds, 3), "tasks_per_second": tasks / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per call at the fake server")
    parser.add_argument("--per-session", type=int, default=8, help="tasks per session at each level")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--executor", choices=["threads", "async"], default="threads",
                        help="sessions as threads, or as coroutines on one event loop (reflexa.aio)")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/speed/concurrency[-async].json")
    args = parser.parse_args()
    suffix = "" if args.executor == "threads" else f"-{args.executor}"
    args.out = args.out or Path(__file__).resolve().parent.parent / "results" / "speed" / f"concurrency{suffix}.json"

    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(port, args.latency), daemon=True)
    server.start()
    pg = None
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        model = f"openai:http://127.0.0.1:{port}/v1?profile=prompt#fake"
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            if args.store == "postgres":
                from reflexa.trace.pgtemp import TempPostgres

                pg = TempPostgres(durable=True)
                pg.start()
            # Imports, the openai client and the store's first open are paid once, outside the timings.
            one_level(1, 1, model, folder, pg.database() if pg else str(folder / "warm.db"), args.executor)
            rows = []
            for level in (int(x) for x in args.levels.split(",")):
                store = pg.database() if pg else str(folder / f"trace-{level}.db")
                row = one_level(level, level * args.per_session, model, folder, store, args.executor)
                rows.append(row)
                print(f"{level:>3} sessions: {row['tasks']:>4} tasks in {row['seconds']:6.2f} s = "
                      f"{row['tasks_per_second']:6.2f} tasks/s", flush=True)
    finally:
        server.kill()
        if pg:
            pg.stop()
    base = rows[0]["tasks_per_second"]
    for row in rows:
        row["ratio"] = round(row["tasks_per_second"] / base, 2)
        row["tasks_per_second"] = round(row["tasks_per_second"], 2)
    report = {"latency": args.latency, "store": args.store, "executor": args.executor,
              "python": sys.version.split()[0], "levels": rows}
    print(json.dumps(report, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
