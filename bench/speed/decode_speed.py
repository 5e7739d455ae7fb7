"""Decode speed of the embedded model through reflexa's seam against raw llama-cpp-python.

    .venv/bin/python bench/speed/decode_speed.py [--model qwen|smollm2|PATH.gguf] [--rounds 5] [--max-tokens 256]

Same weights, same process, same prompt and settings (greedy, the GGUF's own chat template); the two
paths alternate each round so that load on the machine hits both alike. Target: seam >= 0.9x raw.
"""

from __future__ import annotations

import argparse
import statistics
import time

from llama_cpp import Llama

from reflexa.models.local import LocalModel

PROMPT = [
    {
        "role": "user",
        "content": "Write a Python function that checks whether a string is a palindrome, "
        "then explain how it works step by step.",
    }
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen", help="a named local model or a GGUF path (default: qwen)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    seam = LocalModel(args.model)
    raw = Llama(model_path=str(seam.path), n_ctx=4096, n_threads=seam.n_threads, seed=0, verbose=False)
    print(f"model {seam.name}, {seam.n_threads} threads")
    seam.llama  # load before timing  # noqa: B018
    raw_rates, seam_rates = [], []
    for _ in range(args.rounds):
        started = time.perf_counter()
        out = raw.create_chat_completion(PROMPT, max_tokens=args.max_tokens, temperature=0.0)
        raw_rates.append(out["usage"]["completion_tokens"] / (time.perf_counter() - started))
        started = time.perf_counter()
        completion = seam.complete(PROMPT, max_tokens=args.max_tokens, temperature=0.0)
        seam_rates.append(completion.usage.output_tokens / (time.perf_counter() - started))
    raw_med, seam_med = statistics.median(raw_rates), statistics.median(seam_rates)
    print(
        f"raw llama-cpp-python : {raw_med:7.1f} tok/s (median of {args.rounds}; "
        f"{out['usage']['completion_tokens']} tokens a round)"
    )
    print(f"reflexa LocalModel   : {seam_med:7.1f} tok/s")
    print(f"ratio seam/raw       : {seam_med / raw_med:7.3f}  (target >= 0.9)")


if __name__ == "__main__":
    main()
