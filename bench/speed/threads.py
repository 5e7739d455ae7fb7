"""Decode speed of a local model with 1 and 2 llama.cpp threads, idle and beside one CPU-bound process.

    .venv/bin/python bench/speed/threads.py [--model qwen] [--tokens 100] [--threads 1,2] [--out FILE.json]

llama.cpp's decode threads spin-wait for each other at every token, so a thread count equal to the core
count may collapse when any other process is busy. Each thread count is measured twice: with nothing
else of ours running, and while `python -c 'while True: pass'` occupies a core (killed right after).
The rate is streamed tokens after the first over the time from the first to the last, so prompt
evaluation is left out. `others_cores` is the CPU that processes other than this one and its neighbour
used during the measurement (from /proc/stat): above about 0.2, the "idle" figures were not idle.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from reflexa.models.config import default_threads, usable_cores
from reflexa.models.local import LocalModel, load_llama

PROMPT = [{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome, "
           "then explain how it works step by step."}]
TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float | None:
    """CPU seconds spent busy by the whole machine since boot (Linux), else None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / TICK


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def measure(llama: Any, tokens: int, max_seconds: float, neighbour: int | None) -> dict[str, Any]:
    """Decode up to `tokens` tokens (stopping after `max_seconds`) and time them."""
    stamps: list[float] = []
    own0, nb0, busy0, wall0 = cpu_of(os.getpid()), cpu_of(neighbour) if neighbour else 0.0, busy_seconds(), time.time()
    for chunk in llama.create_chat_completion(PROMPT, max_tokens=tokens, temperature=0.0, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            stamps.append(time.perf_counter())
        if stamps and stamps[-1] - stamps[0] > max_seconds:
            break
    wall = time.time() - wall0
    own = cpu_of(os.getpid()) - own0
    nb = (cpu_of(neighbour) - nb0) if neighbour else 0.0
    busy1 = busy_seconds()
    others = None if busy0 is None or busy1 is None else max(0.0, (busy1 - busy0 - own - nb) / wall)
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 2 else 0.0
    return {"tok_s": round(rate, 1), "tokens": len(stamps), "seconds": round(wall, 1),
            "others_cores": None if others is None else round(others, 2)}


def run(llama: Any, args: argparse.Namespace, busy: bool) -> dict[str, Any]:
    if not busy:
        return measure(llama, args.tokens, args.max_seconds, None)
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let the neighbour get scheduled before timing starts
        return measure(llama, args.tokens, args.max_seconds, proc.pid)
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen", help="a named local model or a GGUF path (default: qwen)")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per measurement")
    parser.add_argument("--threads", default="1,2", help="thread counts to compare")
    parser.add_argument("--max-seconds", type=float, default=90.0, help="cut one measurement after this long")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--note", default="", help="what else ran on the machine, for the record")
    args = parser.parse_args()

    counts = [int(n) for n in args.threads.split(",")]
    model = LocalModel(args.model, n_threads=counts[0])
    load_before = [round(v, 2) for v in os.getloadavg()]
    llamas = {n: load_llama(model.path, 2048, n) for n in counts}
    for llama in llamas.values():  # warm-up: page the weights in, build the chat template
        llama.create_chat_completion(PROMPT, max_tokens=4, temperature=0.0)
    rows = []
    for busy in (False, True):
        for n, llama in llamas.items():
            row = {"threads": n, "neighbour": "one busy process" if busy else "none", **run(llama, args, busy)}
            rows.append(row)
            print(f"{n} thread{'s' if n > 1 else ' '}  neighbour {row['neighbour']:<16}  {row['tok_s']:6.1f} tok/s  "
                  f"({row['tokens']} tokens, {row['seconds']} s, other processes used {row['others_cores']} cores)",
                  flush=True)
    report = {"command": shlex.join(["python", *sys.argv]), "model": model.name,
              "date": time.strftime("%Y-%m-%d %H:%M"), "usable_cores": usable_cores(),
              "load_average_before": load_before, "default_threads_here": default_threads(), "note": args.note,
              "runs": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
