"""Every test runs offline, with its trace store and $HOME inside a temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("REFLEXA_TRACE", str(home / "trace.db"))
    for name in ("REFLEXA_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def embedded():
    """The embedded SmolLM2 model. Missing, it skips the test, except under CI, where it fails it."""
    import os

    from reflexa.errors import ModelNotInstalled
    from reflexa.models.local import LocalModel

    try:
        return LocalModel()
    except ModelNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the embedded model: {exc} ({exc.hint})")
        pytest.skip(f"embedded model not installed: {exc.hint}")


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
