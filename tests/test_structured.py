import pytest
from pydantic import BaseModel

from reflexa.models.base import Completion
from reflexa.structured import ask, extract_json, parse


class Reply(BaseModel):
    status: str
    score: int


@pytest.mark.parametrize(
    "text",
    [
        '{"status": "ok", "score": 1}',
        'Sure! Here it is:\n```json\n{"status": "ok", "score": 1}\n```\nAnything else?',
        'First {"status": "draft", "score": 0} then the final {"status": "ok", "score": 1}',
        'prose with a brace } before {"status": "ok", "score": 1} after',
        '{"status": "ok {nested}", "score": 1}',
    ],
)
def test_extracts_json_from_messy_replies(text):
    assert extract_json(text)["status"].startswith("ok")


@pytest.mark.parametrize("text", ["", "no json here", '{"status": "ok", "score": ', "{not json}"])
def test_no_json_is_a_value_error(text):
    with pytest.raises(ValueError):
        extract_json(text)


def test_parse_reports_schema_violations():
    value, error = parse('{"status": "ok", "score": "high"}', Reply)
    assert value is None and "score" in error


def test_parse_validates_dict_schemas():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    assert parse('{"a": 1}', schema) == ({"a": 1}, None)
    value, error = parse('{"a": "x"}', schema)
    assert value is None and "schema violation" in error


def test_ask_reasks_once_with_the_error():
    replies = iter([Completion("garbage", error="no JSON"), Completion('{"x": 1}', value={"x": 1})])
    seen = []

    def call(messages):
        seen.append(messages)
        return next(replies)

    result = ask(call, [{"role": "user", "content": "go"}])
    assert result.value == {"x": 1}
    assert len(seen) == 2 and "no JSON" in seen[1][-1]["content"]


def test_ask_gives_up_after_one_reask():
    calls = []

    def call(messages):
        calls.append(messages)
        return Completion("still bad", error="no JSON")

    result = ask(call, [{"role": "user", "content": "go"}])
    assert result.value is None and len(calls) == 2


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
    "Here: ```json\n" + "[" * 100_000 + "\n```",
    '{"status": "ok", "score": ' + "[" * 5000 + "]" * 5000 + "}",
])
def test_deep_nesting_is_a_value_error_not_a_recursion_error(text):
    with pytest.raises(ValueError, match="nested"):
        extract_json(text)
    value, error = parse(text, Reply)
    assert value is None and "nested" in error


def test_brackets_inside_strings_do_not_count_as_nesting():
    from reflexa.structured import MAX_JSON_DEPTH, json_depth, loads

    text = '{"code": "' + "[" * 500 + '", "s": "a\\\\"}'
    assert json_depth(text) == 1 and loads(text)["s"] == "a\\"
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads(nested) is not None  # at the limit: fine


def test_a_cut_off_reply_says_so():
    from reflexa import ScriptedModel

    completion = ScriptedModel(['{"status": "ok", "score": 1}' * 20]).complete(
        [{"role": "user", "content": "go"}], schema=Reply, max_tokens=5)
    assert completion.truncated and completion.finish_reason == "length"
    assert completion.value is None and "cut off at max_tokens=5" in completion.error


class Answer(BaseModel):
    answer: str


@pytest.mark.parametrize("text", [
    '{"answer": "Paris"}\nFormat used: {"key": "value"}',  # an example after the answer
    'Use a dict literal, it starts with {\n{"answer": "Paris"}',  # a stray brace in prose before it
    '```json\n{"answer": "Paris"}\n```\nExample:\n```json\n{"k": 1}\n```',  # a second fence after it
    'He said "{" then:\n{"answer": "Paris"}',  # a brace inside a quote in prose
])
def test_parse_takes_the_first_place_that_validates_not_the_first_that_parses(text):
    assert parse(text, Answer) == (Answer(answer="Paris"), None)


def test_a_reply_cut_off_inside_a_string_is_still_parsed_in_one_pass():
    from reflexa.structured import json_depth

    cut = '{"answer": "' + 'x "' * 20_000  # every quote opens a string that never closes
    assert parse(cut, Answer)[0] is None and json_depth(cut) == 1
    assert json_depth('["[", {"a": ["]"]}]') == 3


def test_a_json_document_is_only_json():
    from reflexa.structured import json_document

    assert json_document(' ```json\n{"a": 1}\n``` ') == {"a": 1} == json_document('{"a": 1}\n')
    for text in ('{"a": 1} // a comment', '{"a": 1}\n{"a": 2}', 'Here: {"a": 1}'):
        with pytest.raises(ValueError):
            json_document(text)
