"""HotpotQA (distractor setting) with `research`: answer quality, citation quality and cost, three ways.

    .venv/bin/python bench/hotpotqa.py [--model local] [--limit 60] [--strategies no-research,every-time,reflexa]
                                       [--data ../shared/data/hotpotqa/...] [--name NAME] [--skip N] [--report]

Each question's 10 paragraphs form its own corpus, one passage per sentence carrying title and sentence
index, so a citation is correct when its (title, sentence) is among the question's supporting facts.
  (a) no-research   the draft answer alone
  (b) every-time    always search with the question, pass whole paragraphs, revise once (the common way)
  (c) reflexa       `research`: gated, query rules, distilled evidence, audited citations
Reports exact match and F1 (SQuAD normalisation, on the answer with citations and markers stripped), how
often the gold answer appears inside the answer (a small model rarely answers in exactly the gold words),
citation precision and recall against supporting_facts, and tokens and calls per question. Questions run
one after another, every strategy in turn on each, so a run stopped part way compares them on the same
questions. Rows go to bench/results/hotpotqa/rows.jsonl as they finish and a rerun resumes from them; the
report goes to report.json and reflexa's traces to traces.db beside them (not committed: the traces a
figure needs are kept as traces.db.xz; bench/experiments/citation_rules.py reads either). NAME-... with --name.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from _common import DATA, append_row, chosen_strategies, output, read_rows, suite_args, write_report

from reflexa import Budget, Session, SQLiteStore, resolve_model
from reflexa.evaluate.citations import cited
from reflexa.loops import research_prompts as prompts
from reflexa.loops.research import research
from reflexa.runtime import Run
from reflexa.search import Evidence, LocalCorpus
from reflexa.types import Role, StopReason

HOTPOTQA = DATA / "hotpotqa" / "hotpotqa-distractor-dev.jsonl"


def normalise(text: str) -> str:
    text = re.sub(r"\[\d+\]|\[(uncertain: )?|\]", " ", text.lower())
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def answer_only(output: str) -> str:
    """The answer without what `research` appends: its note, failed searches, references."""
    for tail in ("\n\nNo new evidence was sought", "\n\nCould not verify:", "\n\nReferences:"):
        output = output.split(tail)[0]
    return output


def em_f1_contains(prediction: str, gold: str) -> tuple[float, float, float]:
    """SQuAD exact match and token F1, plus whether the gold answer occurs in the prediction."""
    p, g = normalise(prediction).split(), normalise(gold).split()
    exact, contains = float(p == g), float(f" {' '.join(g)} " in f" {' '.join(p)} ")
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return exact, 0.0, contains
    precision, recall = common / len(p), common / len(g)
    return exact, 2 * precision * recall / (precision + recall), contains


def sentence_corpus(row: dict[str, Any]) -> LocalCorpus:
    corpus = LocalCorpus(":memory:")
    corpus.add_passages(
        [
            (title, sentence, title, i)
            for title, sentences in zip(row["context"]["title"], row["context"]["sentences"], strict=True)
            for i, sentence in enumerate(sentences)
        ]
    )
    return corpus


def citation_scores(evidence: list[dict[str, Any]], answer: str, row: dict[str, Any]) -> tuple[int, int, int]:
    """(correct cited, cited, supporting facts)."""
    by_number = {e["n"]: e for e in evidence}
    gold = set(zip(row["supporting_facts"]["title"], row["supporting_facts"]["sent_id"], strict=True))
    cited_facts = {
        (by_number[n]["title"], int(by_number[n]["source"].rsplit("#", 1)[1])) for n in cited(answer) if n in by_number
    }
    return len(cited_facts & gold), len(cited_facts), len(gold)


def every_time(question: str, row: dict[str, Any], model: Any) -> tuple[str, list[dict[str, Any]], Any]:
    """(b): search with the question, whole paragraphs as evidence, one revision."""
    run = Run("baseline", question, model, budget=Budget())
    draft = run.call(Role.GENERATOR, prompts.draft(question), schema=prompts.Draft, max_tokens=512)
    if draft is None or draft.value is None:
        return "", [], run.finish(StopReason.ERROR, output=None, best=None, verdict=None, iterations=0)
    words = set(prompts.content_words(question))
    paragraphs = sorted(
        zip(row["context"]["title"], row["context"]["sentences"], strict=True),
        key=lambda p: -len(words & prompts.content_words(" ".join(p[1]))),
    )[:3]
    evidence = [(n, Evidence(f"{t}#0", f"{t}#0", t, " ".join(s))) for n, (t, s) in enumerate(paragraphs, 1)]
    revised = run.call(
        Role.GENERATOR, prompts.revise(question, draft.value, evidence, {}), schema=prompts.Revision, max_tokens=700
    )
    answer = (prompts.with_citations(revised.value.answer, revised.value.evidence_used,
                                     [e for _, e in evidence], question, revised.value.quote)
              if revised is not None and revised.value is not None else draft.value.answer)
    result = run.finish(StopReason.PASSED, output=answer, best=answer, verdict=None, iterations=1)
    # A whole paragraph cited counts as its first sentence: the baseline cannot point any finer.
    return answer, [{"n": n, "title": e.title, "source": e.source} for n, e in evidence], result


STRATEGIES = ("no-research", "every-time", "reflexa")


def one_question(name: str, row: dict[str, Any], model: Any, store: SQLiteStore) -> dict[str, Any]:
    """One strategy on one question: the row the report is built from."""
    if name == "every-time":
        answer, evidence, result = every_time(row["question"], row, model)
    else:
        result = research(row["question"], sentence_corpus(row), session=Session(model=model, store=store),
                          max_rounds=0 if name == "no-research" else 2)
        answer = result.details.get("answer") or answer_only(result.output or "")
        evidence = result.details.get("evidence", [])
    exact, f1, contains = em_f1_contains(answer, row["answer"])
    good, made, gold = citation_scores(evidence, answer, row)
    usage = result.total_usage
    metrics = {"em": exact, "f1": f1, "contains": contains, "good": good, "cited": made, "gold": gold,
               "tokens": usage.total_tokens, "calls": usage.calls}
    return {"strategy": name, "id": row["id"], "stop": result.stop_reason.value, "answer": answer,
            "metrics": metrics}


def summarise(totals: Counter, n: int) -> dict[str, Any]:
    return {
        "questions_done": n,
        "exact_match": totals["em"] / n,
        "f1": totals["f1"] / n,
        "answer_contained": totals["contains"] / n,
        "citation_precision": totals["good"] / totals["cited"] if totals["cited"] else None,
        "citation_recall": totals["good"] / totals["gold"] if totals["gold"] else None,
        "tokens_per_question": totals["tokens"] / n,
        "calls_per_question": totals["calls"] / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--report", action="store_true", help="only write the report from the rows file")
    parser.add_argument("--data", type=Path, default=HOTPOTQA)
    suite_args(parser, "hotpotqa", STRATEGIES, "questions", limit=60)
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"HotpotQA data not found at {args.data}; pass --data or set REFLEXA_DATA")
    names = chosen_strategies(args.strategies, STRATEGIES)
    rows = [json.loads(line) for line in args.data.read_text().splitlines()][: args.limit or None]
    model = resolve_model(args.model)
    report: dict[str, Any] = {"model": model.name, "questions": len(rows), "strategies": {}}
    out = output(args)
    # One row per (strategy, question), appended as it finishes: a rerun resumes where a run stopped.
    store = SQLiteStore(out.traces)  # reflexa's traces, to read with `reflexa show --trace`
    done = {(r["strategy"], r["id"]): r for r in read_rows(out.rows)}

    def report_so_far() -> None:
        """Over the questions every strategy has answered (a second process may be working on others)."""
        complete = [r for r in rows if all((name, r["id"]) in done for name in names)]
        if not complete:
            return
        for name in names:
            totals: Counter = Counter()
            for r in complete:
                totals.update(done[(name, r["id"])]["metrics"])
            report["strategies"][name] = summarise(totals, len(complete))
        write_report(out.report, report)

    # Question by question, every strategy in turn: a run stopped part way compares them on the same questions.
    todo = [] if args.report else rows[args.skip:]
    for i, row in enumerate(todo, args.skip + 1):
        for name in names:
            if (name, row["id"]) in done:
                continue
            done[(name, row["id"])] = one_question(name, row, model, store)
            append_row(out.rows, done[(name, row["id"])])
            print(f"  {name} {i}/{len(rows)} stop={done[(name, row['id'])]['stop']} "
                  f"f1={done[(name, row['id'])]['metrics']['f1']:.2f}", file=sys.stderr, flush=True)
        report_so_far()  # after every question, so a long run that is stopped keeps what it measured
    report_so_far()
    for name, summary in report["strategies"].items():
        print(
            f"{name:12s} EM {summary['exact_match']:.2f}  F1 {summary['f1']:.2f}  contains "
            f"{summary['answer_contained']:.2f}  citation P {summary['citation_precision']}  R "
            f"{summary['citation_recall']}  tokens/q {summary['tokens_per_question']:.0f}  "
            f"calls/q {summary['calls_per_question']:.2f}",
            flush=True,
        )
    print(f"written to {out.report}")


if __name__ == "__main__":
    main()
