"""Every test runs offline, with its trace store and $HOME inside a temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("REFLEXA_DB", str(home / "trace.db"))
    for name in ("REFLEXA_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def embedded_model_available() -> bool:
    try:
        from reflexa.models.local import LocalModel

        LocalModel()
    except Exception:
        return False
    return True


requires_model = pytest.mark.skipif(not embedded_model_available(), reason="embedded model not installed")
