"""Every test runs offline, with its trace store and $HOME inside a temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("REFLEXA_CACHE_DIR", str(home / "cache" / "reflexa"))
    monkeypatch.setenv("REFLEXA_TRACE", str(home / "trace.db"))
    for name in ("REFLEXA_MODEL", "REFLEXA_REFLECTOR_MODEL", "REFLEXA_THREADS", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                 "ANTHROPIC_API_KEY",
                 # telemetry switches: a developer's collector must not receive the tests' spans
                 "REFLEXA_OTEL", "REFLEXA_METRICS", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def _local_model(name: str):  # -> LocalModel, imported lazily
    """A named local model. Missing, it skips the test, except under CI, where it fails it."""
    import os

    from reflexa.errors import ModelNotInstalled
    from reflexa.models.local import LocalModel

    try:
        return LocalModel(name)
    except ModelNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the local model {name!r}: {exc} ({exc.hint})")
        pytest.skip(f"local model {name!r} not installed: {exc.hint}")


@pytest.fixture(scope="session")
def embedded():
    """SmolLM2-135M (`local:smollm2`): small and fast, so the smoke suite stays quick."""
    return _local_model("smollm2")


@pytest.fixture(scope="session")
def qwen(tmp_path_factory: pytest.TempPathFactory):
    """The default local model, assembled into a temporary cache that is removed afterwards (491 MB)."""
    import shutil

    cache = tmp_path_factory.mktemp("qwen-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REFLEXA_CACHE_DIR", str(cache))
        model = _local_model("qwen")
    yield model
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture()
def shop(tmp_path):
    """A generated shop database (examples/shop/make_shop.py)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "shop" / "make_shop.py"
    spec = importlib.util.spec_from_file_location("make_shop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(tmp_path / "shop.sqlite")
