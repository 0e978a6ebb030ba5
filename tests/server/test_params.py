"""Out-of-range integers and huge parameters: a 400 naming the parameter and its range, before any
work is done, never a 500; and an error never echoes a huge parameter back."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope.analysis import stored
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.store.profile import Profile
from tests.server.conftest import Home, local

BIG = 2**63
HUGE = "9" * 5000


def _jobs(query: str) -> str:
    return f"/api/jobs?{query}"


CASES = [
    (_jobs(f"offset={BIG}"), "offset", "from 0 to 9223372036854775807"),
    (_jobs("offset=-1"), "offset", "from 0 to"),
    (_jobs(f"created_after_ns={BIG}"), "created_after_ns", "from -9223372036854775808 to"),
    (_jobs(f"created_before_ns={10**40}"), "created_before_ns", "to 9223372036854775807"),
    (_jobs(f"created_before_ns={-(BIG + 1)}"), "created_before_ns", "from -9223372036854775808"),
    (_jobs(f"offset={HUGE}"), "offset", "from 0 to"),
]


def _timeline(pid: str, path: str) -> str:
    return f"/api/profiles/{pid}/timeline/{path}"


@pytest.mark.parametrize(("url", "name", "expected"), CASES)
def test_out_of_range_job_queries(client: TestClient, url: str, name: str, expected: str) -> None:
    answer = client.get(url)
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert repr(name) in detail and expected in detail
    assert len(detail) < 300  # a 5,000-digit number is not sent back whole


@pytest.mark.parametrize(
    ("path", "name", "expected"),
    [
        ("dashboard?steps=1:99999999999999999999999", "steps", "0 to 9223372036854775807"),
        (f"dashboard?steps={HUGE}", "steps", "5,000 characters"),
        (f"dashboard?steps=1:{HUGE}", "steps", "expected A:B or N"),
        (f"dashboard?rank={10**30}", "rank", "from 0 to 2147483647"),
        ("dashboard?rank=-1", "rank", "from 0 to"),
        (f"annotations/forward/histogram?steps=0:{BIG}", "steps", "step numbers go from 0"),
    ],
)
def test_out_of_range_dashboards(client: TestClient, home: Home, path: str, name: str, expected: str) -> None:
    answer = client.get(f"/api/profiles/{home.multi}/{path}")
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert repr(name) in detail and expected in detail, detail
    assert len(detail) < 300


@pytest.mark.parametrize(
    ("query", "name"),
    [
        (f"tile?rows=x&t0_ns={-BIG}&t1_ns={BIG - 1}&width=100", "t0_ns"),
        (f"tile?rows=x&t0_ns=0&t1_ns={BIG - 1}&width=100", "t1_ns"),
        (f"flows?rows=x&t0_ns={-BIG}&t1_ns=5", "t0_ns"),
        (f"links?rank=0&correlation={2**64}", "correlation"),
        (f"links?rank={10**30}&correlation=1", "rank"),
        (f"event?id={2**64}", "id"),
    ],
)
def test_out_of_range_timeline_queries(client: TestClient, home: Home, query: str, name: str) -> None:
    answer = client.get(_timeline(home.multi, query))
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert repr(name) in detail and "expected an integer from" in detail


def test_the_widest_window_allowed_is_answered(client: TestClient, home: Home) -> None:
    """The ends of the range themselves work: no overflow inside the tile."""
    rows = client.get(_timeline(home.multi, "rows"))
    for _ in range(600):  # built in the background at the first look (503 meanwhile)
        if rows.status_code != 503:
            break
        rows = client.get(_timeline(home.multi, "rows"))
    assert rows.status_code == 200, rows.text
    row = _first_event_row(rows.json()["root"])
    for t0, t1 in ((0, 2**62), (-(2**62), 0), (2**62 - 10, 2**62)):
        t = client.get(_timeline(home.multi, f"tile?rows={row}&t0_ns={t0}&t1_ns={t1}&width=8192"))
        assert t.status_code == 200, t.text[:500]
    wide = client.get(_timeline(home.multi, f"tile?rows={row}&t0_ns={-(2**62)}&t1_ns={2**62}&width=9"))
    assert wide.status_code == 400 and "a window of at most" in wide.json()["detail"]
    links = client.get(_timeline(home.multi, f"links?rank=2147483647&correlation={BIG - 1}"))
    assert links.status_code == 200 and links.json()["events"] == []


def _first_event_row(node: dict[str, object]) -> str:
    found = str(node.get("id", ""))
    if found.startswith(("host/", "stream/")):
        return found
    for child in node.get("children", []) or []:  # type: ignore[attr-defined]
        hit = _first_event_row(child)
        if hit:
            return hit
    return ""


def test_errors_do_not_echo_a_huge_parameter(client: TestClient, home: Home) -> None:
    big = "a" * 15_000
    for url in (
        f"/api/jobs?sort={big}",
        f"/api/jobs?limit={big}",
        f"/api/profiles/{home.multi}/dashboard?node={big}",
        f"/api/profiles/{home.multi}/timeline/tile?rows={big}&t0_ns=0&t1_ns=5&width=10",
        f"/api/{big}",
    ):
        answer = client.get(url)
        assert 400 <= answer.status_code < 500, (url[:80], answer.status_code)
        assert len(answer.content) < 1500, (url[:80], len(answer.content))


def test_the_row_cap_holds_for_a_stored_dashboard(home: Home, tmp_path: Path) -> None:
    """The whole-profile dashboard kept at import was computed without the server's cap."""
    profile = Profile.open(profile_dir(home.path, home.multi))
    assert stored.load_dashboard(profile) is not None or stored.precompute_dashboard(profile)
    with local(create_app(home.path, static_dir=tmp_path, max_rows=2)) as small:
        answer = small.get(f"/api/profiles/{home.multi}/dashboard")
        assert answer.status_code == 413, answer.text[:300]
        assert "over the server's cap of 2" in answer.json()["detail"]
    with local(create_app(home.path, static_dir=tmp_path)) as client:
        whole = client.get(f"/api/profiles/{home.multi}/dashboard")
        assert whole.status_code == 200
