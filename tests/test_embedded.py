"""Smoke suite on the real embedded model: things work; no accuracy threshold."""

from pathlib import Path

import pytest
from pydantic import BaseModel

from reflexa import Budget, PytestCheck, Session, SQLiteStore, StopReason, refine
from reflexa.models.local import load_llama

EXAMPLE = Path(__file__).parent.parent / "examples" / "is_prime"

pytestmark = pytest.mark.model


class Verdict(BaseModel):
    status: str
    confidence: int


def test_model_loads_once_per_process(embedded):
    assert embedded.name == "local:smollm2"
    assert embedded.llama is embedded.llama
    assert load_llama(embedded.path, embedded.n_ctx, embedded.n_threads) is embedded.llama


def test_the_default_qwen_model_answers_plain_and_structured(qwen):
    assert qwen.name == "local:qwen" and qwen.path.stat().st_size == 491_400_064
    completion = qwen.complete([{"role": "user", "content": "Say hello in one word."}], max_tokens=8)
    assert completion.text.strip() and 0 < completion.usage.output_tokens <= 8
    # The grammar path with Qwen's own chat template (built into the GGUF, not chatml).
    completion = qwen.complete(
        [{"role": "user", "content": "Is 7 prime? Reply with a status and a confidence from 0 to 10."}],
        schema=Verdict, max_tokens=48)
    assert isinstance(completion.value, Verdict), completion.error


def test_plain_completion_reports_usage(embedded):
    completion = embedded.complete([{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert completion.text.strip()
    assert completion.usage.input_tokens > 0 and 0 < completion.usage.output_tokens <= 16
    assert completion.finish_reason in ("stop", "length")


def test_structured_reply_validates_against_the_schema(embedded):
    completion = embedded.complete(
        [{"role": "user", "content": "Is 7 prime? Reply with a status and a confidence from 0 to 10."}],
        schema=Verdict,
        max_tokens=64,
    )
    assert isinstance(completion.value, Verdict), completion.error


def test_whole_refine_run_ends_with_a_valid_stop_reason(embedded, tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    result = refine(
        (EXAMPLE / "task.md").read_text(),
        [PytestCheck(EXAMPLE / "test_solution.py")],
        max_reply_tokens=256,
        session=Session(model=embedded, store=store),
        max_attempts=2,
    )
    assert result.stop_reason in set(StopReason) - {StopReason.ERROR}
    assert result.usage["generator"].calls >= 1
    assert store.get_run(result.run_id).stop_reason == result.stop_reason


def test_whole_react_run_on_the_shop_ends_with_a_valid_stop_reason(embedded, shop):
    from reflexa import react, sql_tools

    # No reflector calls: a grammar-constrained lesson costs tens of seconds on a busy two-core machine,
    # and the reflector path on this model is exercised by bench/faults.py and bench/humaneval.py.
    result = react(
        "How many orders are there?",
        sql_tools(shop),
        budget=Budget(max_reflections=0),
        session=Session(model=embedded),
        max_steps=2,
    )
    assert result.stop_reason in set(StopReason) - {StopReason.ERROR}
    assert result.usage["generator"].calls >= 1


def test_whole_research_run_ends_with_a_valid_stop_reason(embedded, tmp_path):
    import shutil

    from reflexa.loops.research import research
    from reflexa.search import LocalCorpus

    folder = tmp_path / "docs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "docs", folder)
    corpus = LocalCorpus.for_folder(folder)
    corpus.index(folder)
    result = research("How tall is the Eiffel Tower?", corpus, session=Session(model=embedded), max_rounds=1)
    assert result.stop_reason in set(StopReason) - {StopReason.ERROR}
    assert result.usage["generator"].calls >= 1


def test_an_eval_strategy_added_later_reads_back_the_calls_an_earlier_run_made(embedded, tmp_path):
    """`refine`'s first attempt is `single`'s call: made by the first `reflexa eval`, read from the store by
    the second, and billed to refine in full."""
    import json

    from typer.testing import CliRunner

    from reflexa.cli.app import app

    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "a", "task": "Reply with the word GOOD.", "regex": "GOOD"}) + "\n")
    common = [str(data), "-m", "local:smollm2", "--trace", str(tmp_path / "t.db"), "-o", str(tmp_path / "out")]
    for strategies in ("single", "single,refine:reflect=off"):
        result = CliRunner().invoke(app, ["eval", *common, "-s", strategies])
        assert result.exit_code in (0, 1), result.output
    got = {r["strategy"]: r for r in map(json.loads, (tmp_path / "out" / "rows.jsonl").read_text().splitlines())}
    single, refined = got["single"], got["refine:reflect=off"]
    assert refined["shared_calls"] >= 1 and single["shared_calls"] == 0
    assert refined["first_passed"] == single["passed"] and refined["tokens"] >= single["tokens"]
