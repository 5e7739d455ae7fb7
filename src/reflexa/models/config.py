"""Settings read from the environment and the config files: the model specs and llama.cpp's thread count."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from ..errors import ConfigError

CONFIG_NAME = "reflexa.toml"
DEFAULT_SPEC = "local"


def config_paths() -> list[Path]:
    """Config files in the order they are read: ./reflexa.toml, then the user's config directory."""
    from platformdirs import user_config_dir

    return [Path.cwd() / CONFIG_NAME, Path(user_config_dir("reflexa")) / "config.toml"]


def config_value(key: str) -> tuple[Any, Path] | None:
    """The first config file that sets `key`: (value, file). None when no file sets it."""
    for path in config_paths():
        if (value := _file_value(path, key)) is not None:
            return value, path
    return None


def _file_value(path: Path, key: str) -> Any:
    """`key` in the TOML file at `path`; None when the file or the key is not there."""
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return data.get(key)


LOOP_DEFAULTS = {"react": "local:qwen1.5b", "trials": "local:qwen1.5b", "plan": "local:qwen1.5b"}
"""Each loop's own default where measurement chose another model than `local` (Qwen2.5-Coder-0.5B): the agent
loops default to Qwen2.5-Coder-1.5B, which answered 19 of 28 tuning questions over databases and APIs it was
not tuned on where the 0.5B model answered 7 of 24 (bench/README.md, "Agents")."""


def configured_spec(loop: str | None = None) -> str:
    """The model spec in force when no flag names one: $REFLEXA_MODEL, then `model = "..."` in a config
    file, then the default of `loop` (LOOP_DEFAULTS), then `local`. An empty value counts as unset here; an
    explicit empty flag is an error."""
    return _configured("REFLEXA_MODEL", "model") or LOOP_DEFAULTS.get(loop or "", DEFAULT_SPEC)


def configured_reflector_spec() -> str | None:
    """The reflector's model spec when no flag names one: $REFLEXA_REFLECTOR_MODEL, then
    `reflector_model = "..."` in a config file; None (the run's own model reflects) when neither is set."""
    return _configured("REFLEXA_REFLECTOR_MODEL", "reflector_model")


def _configured(env: str, key: str) -> str | None:
    """A setting from the environment variable `env`, else the first config file that sets `key`; an empty
    value counts as unset."""
    if value := os.environ.get(env, "").strip():
        return value
    for path in config_paths():
        found = _file_value(path, key)
        if found is not None and str(found).strip():
            return str(found).strip()
    return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """One core fewer than the machine has (at least one).

    llama.cpp's decode threads spin-wait for each other at every token, so when the thread count equals
    the core count, one other busy process stalls all of them. Qwen2.5-Coder-0.5B on two cores with one
    other process busy: 23.1 tok/s with one thread, 0.3 with two; with two others busy, 11.8 against 0.2
    (bench/speed/threads.py). On an idle machine one thread gives up about a third of the speed
    (29.4 against 43.8 tok/s; bench/README.md, speed probes): a small price next to a 70x collapse. Set
    $REFLEXA_THREADS or `threads = N` to use every core on a machine kept idle.
    """
    return max(1, usable_cores() - 1)


def threads() -> int:
    """llama.cpp's thread count: $REFLEXA_THREADS, else `threads = N` in a config file, else
    `default_threads()`. Anything but a positive whole number is a ConfigError."""
    raw: Any
    if env := os.environ.get("REFLEXA_THREADS"):
        raw, source = env, "$REFLEXA_THREADS"
    elif (found := config_value("threads")) is not None:
        raw, source = found[0], str(found[1])
    else:
        return default_threads()
    count = 0
    if not isinstance(raw, (bool, float)):  # int(True) and int(1.5) would pass silently
        try:
            count = int(raw)
        except (TypeError, ValueError):
            count = 0
    if count < 1:
        raise ConfigError(f"threads must be a whole number of at least 1, not {raw!r} (from {source})",
                          hint=f"this machine has {usable_cores()} usable cores; {default_threads()} is the default")
    return count


def prompt_cache() -> bool:
    """Whether the embedded model keeps a RAM cache of prompt states: $REFLEXA_PROMPT_CACHE (1 turns it
    on), then `prompt_cache = true` in a config file; off by default, because over 8 multi-call HumanEval
    runs it saved no measurable time (415.5 s on, 418.5 s off) for about 1 GB of memory: llama.cpp already
    reuses the prefix a prompt shares with the call just before it."""
    if (env := os.environ.get("REFLEXA_PROMPT_CACHE")) is not None:
        return env.strip().lower() not in ("0", "false", "no", "off", "")
    found = config_value("prompt_cache")
    if found is None:
        return False
    if not isinstance(found[0], bool):  # "false" as a string would be true
        raise ConfigError(f"prompt_cache must be true or false, not {found[0]!r} (from {found[1]})")
    return found[0]
