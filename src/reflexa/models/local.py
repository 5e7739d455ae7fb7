"""The embedded models, run in-process by llama.cpp: a named model (Qwen2.5-Coder-0.5B-Instruct by default,
SmolLM2-135M-Instruct as `local:smollm2`) or any GGUF file (`local:PATH.gguf`)."""

from __future__ import annotations

import atexit
import codecs
import contextlib
import functools
import importlib.util
import json
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelError, ModelNotInstalled
from ..structured import Message
from .base import TIME_UP, Generation, Model, OnToken
from .config import prompt_cache, threads
from .named import DEFAULT, NAMED, NamedModel, is_named
from .weights import ensure

INSTALL_HINT = "pip install 'reflexa[local]'"
GGUF_MAGIC = b"GGUF"

_loaded: dict[tuple[str, int, int], Any] = {}
_load_lock = threading.Lock()
_decode_locks: dict[tuple[str, int, int], threading.Lock] = {}
"""One lock per loaded model, shared by every LocalModel using it: llama.cpp's context decodes one reply at
a time, and two instances (two sessions, say) share the one model `load_llama` keeps per process."""


def _decode_lock(path: Path, n_ctx: int, n_threads: int) -> threading.Lock:
    with _load_lock:
        return _decode_locks.setdefault((str(path), n_ctx, n_threads), threading.Lock())


def weights(name: str = DEFAULT) -> Path:
    """The verified GGUF file of a named model, assembled into the cache on first use."""
    return ensure(NAMED[name])


def check_gguf(path: Path) -> Path:
    """`path` if it is a readable regular file that starts with the GGUF magic, else a ConfigError."""
    hint = f"give a .gguf model file, or a named model: {', '.join(NAMED)}"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"model file not found: {path}", hint=hint) from None
    except OSError as exc:
        raise ConfigError(f"cannot read model file {path}: {exc.strerror}", hint=hint) from None
    if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end; a directory is no model
        raise ConfigError(f"model path is not a regular file: {path}", hint=hint)
    try:
        with path.open("rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ConfigError(f"cannot read model file {path}: {exc.strerror}", hint=hint) from None
    if magic != GGUF_MAGIC:
        raise ConfigError(f"{path} is not a GGUF model file (it does not start with {GGUF_MAGIC!r})", hint=hint)
    return path


def load_llama(path: Path, n_ctx: int, n_threads: int) -> Any:
    """Load a GGUF model once per process; later calls with the same file and settings share it.

    No `chat_format` is given, so llama-cpp-python uses the chat template built into the GGUF file: on
    SmolLM2 it scored 6/40 on HumanEval against 4/40 with chatml.
    """
    try:
        from llama_cpp import Llama
    except ImportError:
        raise ModelNotInstalled("llama-cpp-python is not installed", hint=INSTALL_HINT) from None
    key = (str(path), n_ctx, n_threads)
    with _load_lock:
        if key not in _loaded:
            # verbose=False keeps llama.cpp's load log off the user's terminal.
            try:
                _loaded[key] = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False)
            except ValueError as exc:  # llama.cpp read the GGUF header but not the model behind it
                raise ConfigError(f"llama.cpp cannot load the model file {path}: {exc}",
                                  hint="the file is damaged or not a model llama.cpp supports; give another "
                                  "GGUF file") from None
            if len(_loaded) == 1:
                atexit.register(_close_all)
        return _loaded[key]


def _close_all() -> None:
    # Free the models while the interpreter is whole: llama.cpp's own finaliser, run at shutdown,
    # prints a TypeError once module globals are gone.
    for llama in _loaded.values():
        llama.close()
    _loaded.clear()


# llama-cpp-python's schema converter lets a JSON string hold raw control characters, which JSON forbids;
# a small model then rambles across lines inside one string until max_tokens. Use llama.cpp's own rule.
_LAX_CHAR = 'char ::= [^"\\\\]'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F]'


PROMPT_CACHE_BYTES = 1024 * 1024 * 1024
"""Memory for saved llama.cpp states, by prompt prefix (least recently used dropped first). A state holds
the model's logits buffer too (about 300 MB for Qwen's 151,936-token vocabulary), so this keeps about
three: enough for a generator's prefix to survive a reflector call in between."""

GRAMMAR_MAX_LENGTH = 300
"""The longest `maxLength` put in a grammar. The converter nests one rule per character, and a 2,000-deep
nest crashes llama.cpp's sampler; longer caps are left to code (capped strings are cut after parsing)."""


def _grammar_schema(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _grammar_schema(v) for k, v in node.items()
                if not (k == "maxLength" and isinstance(v, int) and v > GRAMMAR_MAX_LENGTH)}
    if isinstance(node, list):
        return [_grammar_schema(v) for v in node]
    return node


@functools.lru_cache(maxsize=64)
def json_grammar(schema_json: str) -> Any:
    """A llama.cpp grammar that only admits JSON valid for the schema (strings without raw control chars)."""
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(_grammar_schema(json.loads(schema_json))))
    if _LAX_CHAR not in gbnf:  # a converter change: fail loudly rather than decode unconstrained
        raise ModelError("unexpected grammar from llama-cpp-python's schema converter")
    return LlamaGrammar.from_string(gbnf.replace(_LAX_CHAR, _JSON_CHAR), verbose=False)


class LocalModel(Model):
    """A GGUF model run in-process. A schema is enforced by llama.cpp's JSON-schema grammar, so a
    structured reply always parses (its content can still be wrong).

    `target` is a named model (see `reflexa.models.named.NAMED`; default: Qwen2.5-Coder-0.5B-Instruct)
    or a path to a GGUF file; a name wins over a file of the same name (write `./qwen` for the file).
    `n_threads` defaults to `config.threads()`. Calls are serialised with a lock: one llama.cpp context
    cannot decode two prompts at once.

    `cache_prompts` (default: `config.prompt_cache()`, off unless $REFLEXA_PROMPT_CACHE or reflexa.toml
    turns it on) lets llama.cpp skip the prompt prefix a call shares with an earlier one: the state after
    each call is kept (PROMPT_CACHE_BYTES in all), so a revision that continues the first attempt's
    conversation only evaluates what is new, even after a reflector call in between. Off, every prompt is
    evaluated from its first token.

    It streams: `on_token` sees each generated token's text as llama.cpp samples it; and it stops in time:
    a call given `time_left` ends its reply then (see `_watch`).
    """

    streams = True
    stops_in_time = True

    def __init__(self, target: str | Path | None = None, *, n_ctx: int = 4096, n_threads: int | None = None,
                 cache_prompts: bool | None = None) -> None:
        self.named: NamedModel | None = None
        path: Path | None = None
        if target is None or (isinstance(target, str) and is_named(target)):
            self.named = NAMED[str(target or DEFAULT)]
        else:
            path = check_gguf(Path(target))
        if n_threads is not None and n_threads < 1:
            raise ConfigError(f"n_threads must be at least 1, not {n_threads}")
        self.n_threads = n_threads if n_threads is not None else threads()
        if importlib.util.find_spec("llama_cpp") is None:
            raise ModelNotInstalled("llama-cpp-python is not installed", hint=INSTALL_HINT)
        # A named model is assembled and verified now, so a missing or corrupt one fails before a run starts.
        self.path: Path = path if path is not None else ensure(self.named)  # type: ignore[arg-type]
        self.n_ctx = n_ctx
        self.name = f"local:{self.named.name if self.named else self.path.stem}"
        self.cache_prompts = prompt_cache() if cache_prompts is None else cache_prompts
        self._cache: Any = None
        self._lock = _decode_lock(self.path, n_ctx, self.n_threads)

    @property
    def parameters(self) -> float:
        """The parameters of the loaded weights, in billions (loading them if they are not yet)."""
        return float(self.llama._model.n_params()) / 1e9

    @property
    def llama(self) -> Any:
        """The loaded llama.cpp model (loaded on first use, shared within the process)."""
        return load_llama(self.path, self.n_ctx, self.n_threads)

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        on_token: OnToken | None = None, time_left: float | None = None,
    ) -> Generation:
        deadline = None if time_left is None else time.monotonic() + time_left
        # A fixed seed: a sampled reply is the same on every run, like a greedy one (`reseeded` for another).
        kwargs: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                                  "seed": self.seed}
        if json_schema is not None:
            kwargs["grammar"] = json_grammar(json.dumps(json_schema))  # key order is the grammar's field order
        llama = self.llama
        with self._lock:
            self._prepare(llama)
            try:
                with _watch(llama, on_token, deadline) as watched:
                    out = llama.create_chat_completion(**kwargs)
            except ValueError as exc:  # llama.cpp reports an over-long prompt this way
                raise ModelError(f"local model rejected the prompt: {exc}") from None
        choice, usage = out["choices"][0], out["usage"]
        return Generation(
            choice["message"].get("content") or "",
            usage["prompt_tokens"],
            usage["completion_tokens"],
            TIME_UP if watched.timed_out else choice.get("finish_reason") or "stop",
        )

    def _prepare(self, llama: Any) -> None:
        """Point the shared llama.cpp model at this model's prompt cache, or clear what it holds."""
        if self.cache_prompts:
            if self._cache is None:
                self._cache = _bounded_cache(PROMPT_CACHE_BYTES)
            llama.set_cache(self._cache)
        else:
            llama.set_cache(None)
            llama.reset()  # forget the last prompt, whose prefix llama.cpp would otherwise reuse


@dataclass(slots=True)
class _Watched:
    """What watching a call saw: whether it was ended at its deadline."""

    timed_out: bool = False


@contextlib.contextmanager
def _watch(llama: Any, on_token: OnToken | None, deadline: float | None = None) -> Iterator[_Watched]:
    """Show `on_token` each token llama.cpp samples, and end the reply at `deadline` (time.monotonic()),
    while the reply itself comes from the ordinary, non-streaming call.

    Why not `create_chat_completion(stream=True)`: its chunks decode each token on its own with
    errors="ignore" (a character split over two tokens can be lost), and it reports no usage. Watching
    `Llama.generate`, the token generator every completion runs through (llama-cpp-python is pinned),
    changes nothing in the call: the same tokens, text, usage and finish reason, by construction. Ending
    the generator at the deadline ends the reply as max_tokens would (the prompt itself is read whole).
    The watcher is put on the instance for this call only, under the model's lock.
    """
    watched = _Watched()
    original = getattr(llama, "generate", None)
    if (on_token is None and deadline is None) or original is None or "generate" in vars(llama):
        yield watched  # nothing to watch, or an unexpected llama object: run the call untouched
        return
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split over tokens waits

    def generate(tokens: Any, *args: Any, **kwargs: Any) -> Iterator[int]:
        inner = original(tokens, *args, **kwargs)
        try:
            for token in inner:
                # Special tokens (EOS) detokenize to b"".
                if on_token is not None and (text := decode.decode(llama.detokenize([token]))):
                    on_token(text)
                yield token
                if deadline is not None and time.monotonic() >= deadline:
                    watched.timed_out = True
                    return
        finally:
            inner.close()

    llama.generate = generate
    try:
        yield watched
    finally:
        del llama.generate


def _bounded_cache(capacity: int) -> Any:
    """llama-cpp-python's RAM cache, counting every byte a saved state holds. The stock one counts only
    llama.cpp's own state and not the logits buffer each state copies (hundreds of MB for a large
    vocabulary), so it never evicts: a HumanEval run grew to 21 GB before the kernel killed it."""
    from llama_cpp import LlamaRAMCache

    class BoundedRAMCache(LlamaRAMCache):
        @property
        def cache_size(self) -> int:
            return sum(state.llama_state_size + state.scores.nbytes + state.input_ids.nbytes
                       for state in self.cache_state.values())

    return BoundedRAMCache(capacity_bytes=capacity)
