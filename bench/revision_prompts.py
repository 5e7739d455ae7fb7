"""Do revision prompts that ask for a diagnosis first convert failures on the default model?

    REFLEXA_THREADS=2 .venv/bin/python bench/revision_prompts.py ID,ID,... [--variants diag,userdiag,cur]

For each problem (MBPP names from bench/mbpp.py, or HumanEval/N): the first attempt with refine's prompt,
greedy; if it fails its visible check, one revision per variant, greedy, checked the same way. Prints one
line per problem: for each variant PASS, `same` (the revision repeats the attempt) or `diff-fail` (new
code, still failing), with its output tokens; a diagnosing variant's first words are printed too.

    cur       refine's revision: the conversation goes on, then "Write a corrected, complete answer"
    diag      the same conversation, then "First say in one sentence what in the code causes this
              failure. Then write the corrected, complete function"
    user      one user message holding the task, the wrong answer and its failure
    userdiag  that message, asking for the one-sentence diagnosis first

No lessons are given: this isolates the revision's shape. The recorded run is in
bench/results/revision-prompts.log.
"""

from __future__ import annotations

import argparse
import json

import humaneval
import mbpp

from reflexa import CheckContext, resolve_model
from reflexa.loops.refine_prompts import REVISE, fresh, split_reply

DIAGNOSE = ("First say in one sentence what in the code causes this failure. "
            "Then write the corrected, complete function in one fenced code block.")
ASKS = {"cur": REVISE, "diag": DIAGNOSE,
        "user": "Find the mistake and write a corrected, complete answer in one fenced code block.",
        "userdiag": DIAGNOSE}
"""What each variant asks for last; cur and diag go on with the conversation, user and userdiag restate it."""


def feedback_of(signal) -> str:
    """The check's feedback as refine words it (its verdict line, then the output), without refine's cap on
    the output's length and without repeating an output the message already holds."""
    text = f"[{signal.source}] {signal.code}: {signal.message}"
    if signal.evidence and signal.evidence not in signal.message:
        text += f"\nOutput:\n<<<\n{signal.evidence}\n>>>"
    return text


def prompt(variant: str, task: str, code: str, feedback: str) -> list[dict]:
    if variant not in ASKS:
        raise SystemExit(f"unknown variant {variant!r}")
    ask = ASKS[variant]
    if variant in ("cur", "diag"):
        return [*fresh(task, []), {"role": "assistant", "content": f"```\n{code}\n```"},
                {"role": "user", "content": f"Checking it failed:\n{feedback}\n\n{ask}"}]
    return [{"role": "user", "content": f"{task}\n\nThis answer is wrong:\n```\n{code}\n```\n"
                                        f"Checking it failed:\n{feedback}\n\n{ask}"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", help="problem ids, comma-separated")
    parser.add_argument("--variants", default="diag,userdiag")
    parser.add_argument("--model", default="local")
    args = parser.parse_args()
    ids = args.ids.split(",")
    mbpp_problems = mbpp.problems(mbpp.DATA, 1000) if any(i.startswith("mbpp_") for i in ids) else []
    problems = {p.id: p for p in mbpp_problems + humaneval.problems(164)}
    if unknown := [i for i in ids if i not in problems]:
        raise SystemExit(f"unknown problem ids: {', '.join(unknown)}")
    model = resolve_model(args.model)
    for pid in ids:
        p = problems[pid]
        first = model.complete(fresh(p.task, []), max_tokens=512)
        code = split_reply(first.text)[1]
        signal = p.check.run(code, CheckContext(p.task))
        if signal.ok:
            print(pid, "first passes", flush=True)
            continue
        feedback, out = feedback_of(signal), {}
        for variant in args.variants.split(","):
            reply = model.complete(prompt(variant, p.task, code, feedback), max_tokens=600)
            candidate = split_reply(reply.text)[1]
            passed = p.check.run(candidate, CheckContext(p.task)).ok
            same = candidate.strip() == code.strip()
            out[variant] = ("PASS" if passed else "same" if same else "diff-fail", reply.usage.output_tokens)
            if variant.endswith("diag"):
                out[variant + "_said"] = reply.text.split("```")[0].strip()[:150]
        print(pid, json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
