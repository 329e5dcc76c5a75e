"""Fixtures shared by the test modules of this directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ingest_stub import IngestStub


@pytest.fixture
def stub() -> Iterator[IngestStub]:
    """A local ingest server (tests/ingest_stub.py) for an HTTP sink, stopped after the test."""
    server = IngestStub()
    server.start()
    yield server
    if server._server is not None:
        server.stop()
