"""Where a lesson stops converting on the default model: the reflector that writes it, or the attempt that
reads it?

    .venv/bin/python bench/experiments/lesson_probe.py [--example examples/rolling_max] [--model local]
                                                       [--reflector-model SPEC]

On a bundled example (the demo's by default), greedy, as `refine` does it:
  1. the first attempt, and its pytest check;
  2. the reflector on that failure, asked as `refine` asks it (on --reflector-model when given: is a larger
     reflector what is missing?), and whether its lesson is kept;
  3. the next attempt (a fresh start, as after a FAIL) given what `refine` gives it: the kept lesson, else
     the failure itself as the lesson; checked;
  4. the same attempt given a lesson written by hand for the example (WRITTEN below), one that names the
     cause; checked.
When 4 passes and 2 keeps no lesson, the attempt can use a lesson and the reflector is what does not write
one. The recorded runs are in bench/results/experiments/lesson_probe.log: on the default model, and with
the reflector on Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), `--reflector-model local:qwen1.5b` (the `qwen15b`
extra; the log's run passed the same file, assembled by hand, as local:PATH.gguf).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reflexa import Budget, CheckContext, PytestCheck, resolve_model
from reflexa.evaluate.checks import run_checks
from reflexa.loops.refine import _evidence, signal_lesson
from reflexa.loops.refine_prompts import fresh, split_reply
from reflexa.reflect.reflector import reflect
from reflexa.runtime import Run
from reflexa.types import Lesson, Role, Status, Verdict

WRITTEN = {
    "rolling_max": Lesson(
        "attempt 1",
        "test_increasing got [2, 3, 4] where [1, 2, 3, 4] was expected: the first element is missing; "
        "test_empty raised IndexError",
        "the loop runs over numbers[1:] and never appends numbers[0]; numbers[0] fails on an empty list",
        "start with an empty result and no maximum, loop over every number, and append the running maximum "
        "each time"),
}
"""A lesson written by hand per example: what a reflector that found the cause would say. Not a prompt
`refine` uses; only the probe's question whether the attempt can use such a lesson."""


def attempt(run: Run, task: str, lessons: list[Lesson], check: PytestCheck) -> tuple[str, Verdict]:
    reply = run.call(Role.GENERATOR, fresh(task, lessons), max_tokens=512, temperature=0.0)
    if reply is None:
        raise SystemExit("the model call failed")
    candidate = split_reply(reply.text)[1]
    return candidate, run_checks([check], candidate, CheckContext(task))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=Path("examples/rolling_max"))
    parser.add_argument("--model", default="local")
    parser.add_argument("--reflector-model", help="the reflector's model (default: --model)")
    args = parser.parse_args()
    if not (args.example / "task.md").is_file() or not (args.example / "test_solution.py").is_file():
        raise SystemExit(f"{args.example} has no task.md and test_solution.py")
    task, check = (args.example / "task.md").read_text(), PytestCheck(args.example / "test_solution.py")
    run = Run("lesson-probe", task, resolve_model(args.model), budget=Budget(),
              reflector_model=resolve_model(args.reflector_model) if args.reflector_model else None)

    candidate, verdict = attempt(run, task, [], check)
    print(f"1. first attempt: {'PASS' if verdict.status is Status.PASS else 'FAIL'}: {verdict.signals[0].message}")
    if verdict.status is Status.PASS:
        return
    failure = verdict.failing[0]
    lesson, why = reflect(run, task=task, facts=[], failing_action=candidate, signal=failure,
                          snippet=_evidence(verdict))
    reflector = run.reflector_model or run.model
    print(f"2. reflector ({reflector.name}): {'kept: ' + lesson.render() if lesson else 'discarded (' + why + ')'}")
    given = lesson or signal_lesson(1, failure)
    for step, lessons in (("3. next attempt, refine's lesson", [given]),
                          ("4. next attempt, the written lesson", [WRITTEN[args.example.name]] if
                           args.example.name in WRITTEN else [])):
        if not lessons:
            print(f"{step}: no lesson written for {args.example.name}")
            continue
        retried, checked = attempt(run, task, lessons, check)
        print(f"{step}: {'PASS' if checked.status is Status.PASS else 'FAIL'}"
              f"{' (the first attempt again)' if retried == candidate else ''}: {checked.signals[0].message}")


if __name__ == "__main__":
    main()
