"""Settings read from the environment and the config files."""

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
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{path} is not valid TOML: {exc}") from None
            if key in data:
                return data[key], path
    return None


def configured_spec() -> str:
    """The model spec in force when no flag names one: $REFLEXA_MODEL, then `model = "..."` in a config
    file, then `local`. An empty value counts as unset here; an explicit empty flag is an error."""
    if spec := os.environ.get("REFLEXA_MODEL"):
        return spec
    found = config_value("model")
    if found is not None and found[0]:
        return str(found[0])
    return DEFAULT_SPEC
