"""A real PostgreSQL server for the store and batch tests (Debian's `postgresql` package, which .ci/run
installs). Without it the PostgreSQL tests are skipped with the reason, except under CI, where they fail."""

from __future__ import annotations

import os

import pytest

from reflexa.errors import StoreError
from reflexa.trace.pgtemp import TempPostgres


@pytest.fixture(scope="session")
def pg_server():
    server = TempPostgres()
    try:
        server.start()
    except StoreError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to start PostgreSQL: {exc} ({exc.hint})")
        pytest.skip(f"no PostgreSQL server: {exc}")
    yield server
    server.stop()


def store_target(kind: str, tmp_path, pg_server_factory) -> str:
    """A fresh store of `kind` ("sqlite" or "postgres"): a file path or a new database's URL."""
    if kind == "sqlite":
        return str(tmp_path / "trace.db")
    return pg_server_factory().database()
