"""Fixtures shared by the test modules of this directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ingest_stub import IngestStub

# A skipped kernel test fails a run on a machine that can run it (tests/skip_gate.py).
pytest_plugins = ["skip_gate"]


@pytest.fixture
def stub() -> Iterator[IngestStub]:
    """A local ingest server (tests/ingest_stub.py) for an HTTP sink, stopped after the test."""
    server = IngestStub()
    server.start()
    yield server
    if server._server is not None:
        server.stop()
