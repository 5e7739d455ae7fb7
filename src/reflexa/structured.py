"""Structured output: tolerant JSON extraction, validation, and one re-ask on failure.

A reply that still does not validate after the re-ask is not an exception: the caller turns it into
a SCHEMA signal.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ValidationError, WithJsonSchema

from .types import cap, valid_text

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

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a reply may have. Deeper JSON is refused before it is parsed:
the parser, the validators and the trace's serialiser all recurse, and a reply of 100,000 `[` must be a
ValueError, not a RecursionError (or a stack overflow) somewhere downstream."""


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in `text`, brackets inside strings not counted. One pass: a reply
    cut off inside a string must not cost a scan per quote (a regex over it took 10 s for 48 KB)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


def loads(text: str) -> Any:
    """json.loads with bounded nesting: ValueError (json.JSONDecodeError's base) for anything that does
    not parse or nests deeper than MAX_JSON_DEPTH."""
    if (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested {depth} levels deep (the limit is {MAX_JSON_DEPTH})")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    # "\ud800" is valid JSON and decodes to a lone surrogate, which nothing downstream can encode.
    return _valid(data) if "\\u" in text else data


def _valid(data: Any) -> Any:
    """Decoded JSON with every string made valid text (`valid_text`), keys included."""
    if isinstance(data, str):
        return valid_text(data)
    if isinstance(data, list):
        return [_valid(item) for item in data]
    if isinstance(data, dict):
        return {valid_text(key): _valid(value) for key, value in data.items()}
    return data


def json_schema_of(schema: Schema) -> dict[str, Any]:
    """The JSON schema for a pydantic model class, or the dict itself."""
    if isinstance(schema, dict):
        return schema
    return _model_schema(schema)


@functools.cache
def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    # Building a schema costs about 1 ms; a loop asks for the same one on every iteration.
    return model.model_json_schema()


MAX_OBJECT_STARTS = 64
"""Places a reply is tried for a JSON object at most: a reply of many stray braces stays cheap."""


def _objects(text: str) -> list[str]:
    """The JSON objects in text, in order: at each `{` outside an object found already, the object that
    json's own decoder reads from there. A stray brace in prose ("it starts with {") is skipped."""
    spans: list[str] = []
    decoder, start = json.JSONDecoder(), text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if start == -1:
            break
        try:
            _, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            start = text.find("{", start + 1)
            continue
        spans.append(text[start:end])
        start = text.find("{", end)
    return spans


def _candidates(text: str) -> list[str]:
    """Where a reply's JSON may be, in the order tried: the whole text, fenced blocks and objects (the
    last first: a model that corrects itself ends with the right one)."""
    return [text.strip(), *reversed(_FENCE.findall(text)), *reversed(_objects(text))]


def extract_json(text: str) -> Any:
    """Find the JSON value in a model reply: the whole text, a fenced block, or the last JSON object.

    Raises ValueError when there is none.
    """
    too_deep = None
    for candidate in _candidates(text):
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
    """(value, None) for the first place in text that holds a valid value for schema (an example object
    after the answer does not hide it), else (None, a one-line reason: the first one found)."""
    first_error = None
    for candidate in _candidates(text):
        try:
            data = loads(candidate)
        except json.JSONDecodeError:
            continue
        except ValueError as exc:  # too deep: say so rather than "does not parse"
            first_error = first_error or str(exc)
            continue
        value, error = _validated(data, schema)
        if error is None:
            return value, None
        first_error = first_error or error
    if first_error is not None:
        return None, first_error
    return None, "no JSON object found in the reply" if "{" not in text else "the reply's JSON does not parse"


def schema_error(schema: dict[str, Any], data: Any, *, message_chars: int | None = None) -> str | None:
    """Why `data` does not fit a JSON schema: the most telling error, led by where it is (`items.0: ...`),
    its message capped at `message_chars` when given; None when it fits."""
    import jsonschema  # deferred: only dict schemas need it

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is None:
        return None
    message = error.message if message_chars is None else cap(error.message, message_chars)
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where}: {message}" if where else message


def _validated(data: Any, schema: Schema) -> tuple[Any, str | None]:
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


def json_document(text: str) -> Any:
    """The JSON document `text` is, allowing only whitespace and one code fence around it: what a check
    that the candidate *is* JSON reads (extract_json would find JSON inside prose). ValueError if not."""
    stripped = text.strip()
    fenced = _FENCE.fullmatch(stripped)
    return loads(fenced.group(1) if fenced else stripped)


LOOP_TAIL = 1200
"""Characters at the end of a cut-off reply that `looping` reads; a reply shorter than a third of this is
never taken for a loop (too little text for its compression to say anything)."""
LOOP_RATIO = 0.2
"""A tail that compresses to under this share of its size repeats itself. Measured on Qwen2.5-Coder-0.5B's
HotpotQA-60 replies: all 17 cut off at max_tokens were runaway loops (a sentence again and again, a number
or a word changing), at 0.07 to 0.19; its ordinary replies 0.33 and up."""


def looping(text: str) -> bool:
    """The reply ends in a loop (the same words over and over), the way a small model runs on until
    max_tokens: asked again with more room, greedy decoding writes the same loop, only longer."""
    tail = text[-LOOP_TAIL:].encode(errors="replace")
    return len(tail) >= LOOP_TAIL // 3 and len(zlib.compress(tail, 9)) < LOOP_RATIO * len(tail)


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
