"""Structured output: tolerant JSON extraction, validation, and one re-ask on failure.

A reply that still does not validate after the re-ask is not an exception: the caller turns it into
a SCHEMA signal.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ValidationError, WithJsonSchema

Schema = type[BaseModel] | dict[str, Any]
Message = dict[str, str]


def _cut(limit: int) -> Callable[[str], str]:
    return lambda text: text if len(text) <= limit else text[: limit - 1] + "…"


# Named so type checkers see a type, not a call: a field of one of these is a str capped at that length.
Text80 = Annotated[str, AfterValidator(_cut(80)), WithJsonSchema({"type": "string", "maxLength": 80})]
Text200 = Annotated[str, AfterValidator(_cut(200)), WithJsonSchema({"type": "string", "maxLength": 200})]
Text300 = Annotated[str, AfterValidator(_cut(300)), WithJsonSchema({"type": "string", "maxLength": 300})]
Text2000 = Annotated[str, AfterValidator(_cut(2000)), WithJsonSchema({"type": "string", "maxLength": 2000})]

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a reply may have. Deeper JSON is refused before it is parsed:
the parser, the validators and the trace's serialiser all recurse, and a reply of 100,000 `[` must be a
ValueError, not a RecursionError (or a stack overflow) somewhere downstream."""


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in `text`, brackets inside strings not counted."""
    brackets = (1 if c in "[{" else -1 for c in _STRING.sub("", text) if c in "[]{}")
    return max(accumulate(brackets), default=0)


def loads(text: str) -> Any:
    """json.loads with bounded nesting: ValueError (json.JSONDecodeError's base) for anything that does
    not parse or nests deeper than MAX_JSON_DEPTH."""
    if (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested {depth} levels deep (the limit is {MAX_JSON_DEPTH})")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def json_schema_of(schema: Schema) -> dict[str, Any]:
    """The JSON schema for a pydantic model class, or the dict itself."""
    if isinstance(schema, dict):
        return schema
    return _model_schema(schema)


@functools.cache
def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    # Building a schema costs about 1 ms; a loop asks for the same one on every iteration.
    return model.model_json_schema()


def _objects(text: str) -> list[str]:
    """Every balanced top-level {...} span in text, in order. Braces inside strings are respected."""
    spans, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"' and depth > 0:
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def extract_json(text: str) -> Any:
    """Find the JSON value in a model reply: the whole text, a fenced block, or the last JSON object.

    Raises ValueError when there is none.
    """
    stripped = text.strip()
    candidates = [stripped, *reversed(_FENCE.findall(text)), *reversed(_objects(text))]
    too_deep = None
    for candidate in candidates:
        try:
            return loads(candidate)
        except json.JSONDecodeError:
            continue
        except ValueError as exc:  # too deep: say so rather than "does not parse"
            too_deep = exc
    if too_deep is not None:
        raise too_deep
    raise ValueError("no JSON object found in the reply" if "{" not in text else "the reply's JSON does not parse")


def parse(text: str, schema: Schema) -> tuple[Any, str | None]:
    """(value, None) when text holds a valid value for schema, else (None, a one-line reason)."""
    try:
        data = extract_json(text)
    except ValueError as exc:
        return None, str(exc)
    if isinstance(schema, dict):
        import jsonschema  # deferred: only dict schemas need it

        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as exc:
            return None, f"schema violation: {exc.message}"
        return data, None
    try:
        return schema.model_validate(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        return None, f"schema violation at {where}: {first['msg']}"


def reask_messages(messages: list[Message], reply: str, error: str) -> list[Message]:
    """The conversation for the single re-ask: the bad reply and what was wrong with it."""
    return [
        *messages,
        {"role": "assistant", "content": reply[:2000]},
        {"role": "user", "content": f"That reply was invalid ({error}). Answer again with only the JSON object."},
    ]


def ask(call: Callable[[list[Message]], Any], messages: list[Message], *, first: Any = None) -> Any:
    """Call once (or take `first`, a reply already made); if the reply's value is missing, re-ask once
    with the validation error.

    `call` returns a Completion (value, error, text). Returns the last Completion, or None when the
    caller's budget refused the first call (a refused re-ask returns the first reply).
    """
    completion = first if first is not None else call(messages)
    if completion is None or completion.value is not None:
        return completion
    retry = call(reask_messages(messages, completion.text, completion.error or "invalid"))
    return retry if retry is not None else completion
