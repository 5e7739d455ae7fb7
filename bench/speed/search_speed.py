"""Local search speed: query latency p50/p99 over a generated 100,000-passage corpus, and cache-hit latency.

    .venv/bin/python bench/speed/search_speed.py [--passages 100000] [--queries 500]

Targets: p50 <= 5 ms per query; a cache hit <= 1 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from reflexa import SQLiteStore
from reflexa.search import LocalCorpus, SearchCache

WORDS = [f"{a}{b}{c}" for a in "bcdfghklmnprstvz" for b in "aeiou" for c in "lmnrst"]  # 480 pseudo-words


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 20))) + "."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = LocalCorpus(Path(tmp) / "corpus.sqlite")
        started = time.perf_counter()
        for batch in range(0, args.passages, 10_000):
            corpus.add_passages(
                [
                    (f"doc {i // 20}", " ".join(sentence(rng) for _ in range(3)), f"doc{i // 20}.md", i % 20)
                    for i in range(batch, min(batch + 10_000, args.passages))
                ]
            )
        build = time.perf_counter() - started
        queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 6))) for _ in range(args.queries)]
        corpus.search(queries[0], 5)  # warm the page cache
        latencies = []
        for query in queries:
            started = time.perf_counter()
            corpus.search(query, 5)
            latencies.append((time.perf_counter() - started) * 1000)
        cache = SearchCache(SQLiteStore(Path(tmp) / "trace.db"))
        for query in queries[:100]:
            cache.put("local", query, corpus.search(query, 5))
        hits = []
        for query in queries[:100]:
            started = time.perf_counter()
            assert cache.get("local", query) is not None
            hits.append((time.perf_counter() - started) * 1000)
    print(f"corpus: {args.passages} passages, built in {build:.1f} s")
    print(
        f"query latency over {len(queries)} queries: p50 {statistics.median(latencies):.2f} ms, "
        f"p99 {percentile(latencies, 0.99):.2f} ms (target p50 <= 5 ms)"
    )
    print(
        f"cache hit latency over {len(hits)} hits: p50 {statistics.median(hits):.3f} ms, "
        f"p99 {percentile(hits, 0.99):.3f} ms (target <= 1 ms)"
    )


if __name__ == "__main__":
    main()
