"""The wire between a script check's judge and the candidate's process (see _judge.py and _serve.py): framed
messages of plain data, and the codec that makes a value plain data or refuses it.

Plain data is what crosses: None, bool, int, float, complex, str, bytes, and lists, tuples, sets, frozensets
and dicts of them, compared where they arrive by Python's own rules. No object crosses with methods of its
own, so nothing the candidate wrote runs where the tests are judged: an object whose `__eq__` says yes to
everything arrives as a handle, which equals nothing but itself.

Standalone on purpose: its source is prepended to _judge.py's and _serve.py's, which run as `python -c`
and must not import reflexa.
"""
# ruff: noqa: ANN401 - a wire carries Any
from __future__ import annotations

import json
import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_MESSAGE = 8 * 1024 * 1024
"""Bytes one message may hold: a result larger than this is refused, not sent."""
MAX_ITEMS = 200_000
"""Values one message may hold, all containers counted: a bound on what a hostile result costs to read."""
MAX_DEPTH = 64
"""How deep containers may nest in one value."""


class WireError(Exception):
    """A value that cannot cross as plain data, or a broken or closed wire."""


def send(fd: int, message: Any) -> None:
    """Write one framed message (4-byte length, then JSON)."""
    data = json.dumps(message, allow_nan=True).encode("utf-8", "surrogatepass")
    if len(data) > MAX_MESSAGE:
        raise WireError(f"the message is {len(data)} bytes, over the {MAX_MESSAGE} a message may hold")
    frame = struct.pack(">I", len(data)) + data
    while frame:
        frame = frame[os.write(fd, frame):]


def receive(fd: int) -> Any:
    """Read one framed message; WireError when the other side has gone or sends garbage."""
    size = struct.unpack(">I", _exactly(fd, 4))[0]
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes announced, over the {MAX_MESSAGE} allowed")
    try:
        return json.loads(_exactly(fd, size).decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"an unreadable message: {exc}") from None


def _exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the other process is gone")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def encode(value: Any, handle: Any = None) -> Any:
    """`value` as JSON-ready plain data. `handle(obj)`, when given, turns an object that is not plain data
    into a handle's data; without it such an object is a WireError."""
    count = [0]

    def walk(item: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise WireError(f"the value is larger than {MAX_ITEMS} items or deeper than {MAX_DEPTH}")
        kind = type(item)
        if item is None or kind in (bool, int, str):
            return item
        if kind is float:
            return {"$": "float", "v": repr(item)}  # exact, and nan and inf as they are
        if kind is complex:
            return {"$": "complex", "v": [repr(item.real), repr(item.imag)]}
        if kind is bytes:
            return {"$": "bytes", "v": item.decode("latin-1")}
        if kind in (list, tuple, set, frozenset):
            return {"$": kind.__name__, "v": [walk(x, depth + 1) for x in item]}
        if kind is dict:
            return {"$": "dict", "v": [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in item.items()]}
        base = _plain_base(item)
        if base is not None:
            return walk(base, depth)
        if handle is None:
            raise WireError(f"a {kind.__name__} object cannot cross to the candidate's process: only plain data")
        return handle(item)

    return walk(value, 0)


_BASES: tuple[Any, ...] = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)


def _plain_base(item: Any) -> Any:
    """An instance of a subclass of a plain type (a Counter, a namedtuple, an IntEnum, an int that says it
    equals everything) as the plain value it holds, read through the base type's own methods, so no method
    the subclass defines decides what crosses; None for anything else."""
    base: Any = next((b for b in _BASES if isinstance(item, b) and type(item) is not b), None)
    if base is None:
        return None
    if base in (str, bytes):
        return base.__getitem__(item, slice(None))
    if base is int:
        return int.__int__(item)
    if base is float:
        return float.__float__(item)
    if base is complex:
        return complex(*complex.__getnewargs__(item))  # type: ignore[attr-defined]
    if base is dict:
        return {k: dict.__getitem__(item, k) for k in list(dict.__iter__(item))}
    return base(base.__iter__(item))


def decode(data: Any, handle: Any = None) -> Any:
    """Plain data back from `encode`'s form. `handle(data)` makes an object of a handle's data; without
    it a handle is a WireError."""
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is not dict or "$" not in data:
        raise WireError("malformed value on the wire")
    tag: Any = data["$"]
    value: Any = data.get("v")
    if value is None and tag != "handle":
        raise WireError("malformed value on the wire")
    if tag == "float":
        return float(value)
    if tag == "complex":
        return complex(float(value[0]), float(value[1]))
    if tag == "bytes":
        return str(value).encode("latin-1")
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [decode(x, handle) for x in value]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k, handle): decode(v, handle) for k, v in value}
    if tag == "handle" and handle is not None:
        return handle(data)
    raise WireError(f"unknown value on the wire: {tag!r}")
