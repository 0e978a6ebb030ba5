"""Fixtures of the store's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hyperscope.store import _creader


@pytest.fixture(params=["c", "sql"])
def both_readers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with the compiled chunk reader, then with DuckDB's SQL transform alone (what
    an install without a C compiler uses): both must behave the same."""
    if request.param == "c" and not _creader.available():
        pytest.skip("no C compiler: the compiled reader cannot be built here")
    monkeypatch.setenv(_creader.ENV, request.param)
    yield request.param
