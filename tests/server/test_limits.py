"""Query limits: a query over the time limit answers 504 and is stopped; a table over the row cap
answers 413; either way the server goes on answering."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import hyperscope.server.limits as limits_module
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.server.analysis_db import AnalysisDatabase
from hyperscope.server.limits import QueryLimits, QueryTimeout
from hyperscope.store.profile import Profile
from tests.server.conftest import Home, local


def query_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("hyperscope-query-")]


def test_time_limit_answers_504_and_the_server_goes_on(home: Home, tmp_path: Path) -> None:
    app = create_app(home.path, query_timeout_s=0.001, static_dir=tmp_path)
    with local(app) as client:
        slow = client.get(f"/api/profiles/{home.big}/dashboard")
        assert slow.status_code == 504
        assert "0.001 s query limit" in slow.json()["detail"] and "--query-timeout" in slow.json()["detail"]
        # the next request is answered (the catalog needs no query)
        assert client.get("/api/jobs").json()["total"] == 3
        info = client.get(f"/api/profiles/{home.big}")
        assert info.status_code == 200  # shown without the GPUs each rank ran on, which need a query
        assert any("GPUs each rank ran on are not shown" in n for n in info.json()["notes"])
        assert client.get(f"/api/profiles/{home.big}/filters").status_code == 504
        # a failed answer is not cached as an answer
        assert client.get(f"/api/profiles/{home.big}/dashboard").status_code == 504
    for thread in query_threads():  # interrupted, they unwind instead of running to the end
        thread.join(timeout=120)
        assert not thread.is_alive()


def test_interrupted_query_stops_inside_duckdb(home: Home) -> None:
    """The worker is interrupted, not left to finish: its error is DuckDB's interruption."""
    profile = Profile.open(profile_dir(home.path, home.big))
    seen: list[BaseException] = []
    started = threading.Event()

    def endless(con: object) -> int:
        import duckdb

        assert isinstance(con, duckdb.DuckDBPyConnection)
        started.set()
        try:  # a query that would run for hours
            return int(con.execute("SELECT count(*) FROM range(10000000000) a, range(1000) b").fetchone()[0])  # type: ignore[index]
        except BaseException as exc:
            seen.append(exc)
            raise

    # The limit is reached once the query runs inside DuckDB, however long a loaded machine takes
    # to open the connection (a wall-clock 0.5 s was spent before the query started at load 20+).
    def limit_reached_once_started(done: threading.Event, left_s: float, what: str) -> bool:
        assert started.wait(120), "the query never started"
        return done.is_set()

    with pytest.raises(QueryTimeout, match=re.escape("took longer than the server's 0.5 s query limit")):
        QueryLimits(timeout_s=0.5, wait=limit_reached_once_started).run(profile, endless, "endless")
    for thread in query_threads():
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert started.is_set() and seen and "INTERRUPT" in type(seen[0]).__name__.upper()


def test_row_cap_answers_413(home: Home, tmp_path: Path) -> None:
    with local(create_app(home.path, max_rows=40, static_dir=tmp_path)) as client:
        big = client.get(f"/api/profiles/{home.multi}/dashboard?buckets=50")  # 50 buckets x 4 ranks
        assert big.status_code == 413
        assert "40" in big.json()["detail"] and "--max-rows" in big.json()["detail"]
        small = client.get(f"/api/profiles/{home.multi}/dashboard?buckets=5&top_k=5")
        assert small.status_code == 200
        hist = client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram?bins=41")
        assert hist.status_code == 413
        assert (
            client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram?bins=40").status_code == 200
        )


def test_a_kept_answer_is_held_to_the_row_cap_and_else_computed(home: Home) -> None:
    """What import kept is returned as it is when under the cap, refused over it, and a profile
    without one is computed."""
    from hyperscope.server.limits import RowCapExceeded

    profile = Profile.open(profile_dir(home.path, home.big))
    limits = QueryLimits(max_rows=2)
    asked: list[str] = []

    def work(con: object) -> dict[str, Any]:
        asked.append("computed")
        return {"computed": True}

    tables = {"kernels": {"rows": [1, 2]}, "steps": {"rows": []}}
    assert limits.kept_or_run(tables, profile, work, "the dashboard") is tables
    one = {"rows": [1, 2, 3]}
    with pytest.raises(RowCapExceeded, match="'collective_waits' has 3 rows"):
        limits.kept_or_run(one, profile, work, "the waits", table="collective_waits")
    choices = {"nodes": ["a", "b", "c"], "rank_nodes": {"0": "a"}}  # not tables: no rows to count
    assert limits.kept_or_run(choices, profile, work, "the filters", tables=False) is choices
    assert asked == []
    assert limits.kept_or_run(None, profile, work, "the dashboard") == {"computed": True}
    assert asked == ["computed"]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="query_timeout_s"):
        QueryLimits(timeout_s=0)
    with pytest.raises(ValueError, match="max_rows"):
        QueryLimits(max_rows=0)


def test_busy_slots_count_in_the_time_limit(home: Home) -> None:
    profile = Profile.open(profile_dir(home.path, home.big))
    release = threading.Event()
    holding = threading.Event()

    def wait(done: threading.Event, left_s: float, what: str) -> bool:
        if what == "holder":  # its request gives up once its work holds the slot, whatever the load
            assert holding.wait(120), "the holder's work never started"
            return done.is_set()
        return done.wait(120)  # the others: only their wait for the slot is timed (0.5 s, for real)

    limits = QueryLimits(timeout_s=0.5, concurrent=1, wait=wait)
    holder_timed_out: list[QueryTimeout] = []

    def hold(con: object) -> int:
        holding.set()
        release.wait(120)
        return 1

    def holder() -> None:
        # its request times out too, but its worker keeps the slot until it has really stopped
        try:
            limits.run(profile, hold, "holder")
        except QueryTimeout as exc:
            holder_timed_out.append(exc)

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(120)
    try:
        first.join(120)
        assert holder_timed_out and "query limit" in str(holder_timed_out[0])
        with pytest.raises(
            QueryTimeout, match=re.escape("waited 0.5 s for one of the server's 1 analysis slots")
        ):
            limits.run(profile, lambda con: 2, "second")
    finally:
        release.set()
        first.join(120)
    for thread in query_threads():  # the holder's worker gives the slot back as it ends
        thread.join(timeout=120)
        assert not thread.is_alive()
    assert limits.run(profile, lambda con: 3, "third") == 3  # the slot was given back


def test_one_computation_per_scope_at_a_time(home: Home, tmp_path: Path) -> None:
    """Two requests for the same scope at once: one computes, the other gets its answer."""
    app = create_app(home.path, static_dir=tmp_path)
    url = f"/api/profiles/{home.big}/dashboard?rank=2"
    with local(app) as client:
        answers: list[dict[str, object]] = []
        threads = [threading.Thread(target=lambda: answers.append(client.get(url).json())) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert sorted(a["cached"] for a in answers) == [False, True, True]  # type: ignore[type-var]
    assert answers[0]["tables"] == answers[1]["tables"] == answers[2]["tables"]


def test_a_lazy_run_opens_duckdb_only_when_asked(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """Timeline tiles of event rows are answered from the index alone: no connection is opened;
    one that is opened on first use is still interrupted at the time limit and closed."""
    profile = Profile.open(profile_dir(home.path, home.big))
    opened: list[object] = []
    real = AnalysisDatabase.connection

    def counting(self: AnalysisDatabase, source: Profile) -> object:
        opened.append(source)
        return real(self, source)

    monkeypatch.setattr(AnalysisDatabase, "connection", counting)
    started = threading.Event()

    def wait(done: threading.Event, left_s: float, what: str) -> bool:
        if what == "endless":  # the limit is reached once its query runs inside DuckDB
            assert started.wait(120), "the query never started"
            return done.is_set()
        return done.wait(120)  # the others finish, however slowly a loaded machine opens DuckDB

    limits = QueryLimits(timeout_s=0.5, wait=wait)
    assert limits.run(profile, lambda con: 41 + 1, "no query", lazy=True) == 42
    assert opened == []
    assert limits.run(profile, lambda con: con.execute("SELECT 7").fetchall()[0][0], "one", lazy=True) == 7
    assert len(opened) == 1
    seen: list[BaseException] = []
    ended = threading.Event()

    def endless(con: Any) -> int:
        try:
            query = "SELECT count(*) FROM range(10000000000) a, range(1000) b"
            con.execute("SELECT 1")  # the connection opens (and can be interrupted) at first use
            started.set()
            return int(con.execute(query).fetchall()[0][0])
        except BaseException as exc:
            seen.append(exc)
            raise
        finally:
            ended.set()

    with pytest.raises(QueryTimeout):
        limits.run(profile, endless, "endless", lazy=True)
    # light work runs on the server's kept light threads: it ends (interrupted), they stay
    assert ended.wait(60), "the interrupted query never ended"
    assert seen and "INTERRUPT" in type(seen[0]).__name__.upper()


def test_light_work_from_the_event_loop_is_timed_and_queued(home: Home) -> None:
    """``run_async`` (the tile route's): the answer, errors re-raised, the time limit while the
    work runs, and a request whose work no light thread took up in time is answered as waiting."""
    profile = Profile.open(profile_dir(home.path, home.big))
    limits = QueryLimits(timeout_s=1.0, light=1)
    release, holding, ended = threading.Event(), threading.Event(), threading.Event()

    def opened() -> tuple[str, Profile]:
        return "hit", profile

    def hold(hit: str, source: Profile, con: object) -> str:
        holding.set()
        release.wait(120)
        ended.set()
        return hit

    def fails(hit: str, source: Profile, con: object) -> str:
        raise ValueError("bad row")

    async def scenario() -> None:
        assert await limits.run_async(opened, lambda hit, source, con: f"{hit} {source is profile}", "a") == (
            "hit True"
        )
        with pytest.raises(ValueError, match="bad row"):
            await limits.run_async(opened, fails, "failing")
        held = asyncio.ensure_future(limits.run_async(opened, hold, "holder"))
        assert await asyncio.to_thread(holding.wait, 120), "the holder never started"
        with pytest.raises(QueryTimeout, match=re.escape("waited 1 s for one of the server's 1")):
            await limits.run_async(opened, lambda hit, source, con: hit, "queued")
        with pytest.raises(QueryTimeout, match="query limit"):
            await held
        release.set()
        assert await asyncio.to_thread(ended.wait, 120)
        # the one light thread is free again once the holder's work has ended
        assert await limits.run_async(opened, lambda hit, source, con: hit, "after") == "hit"

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_idle_light_threads_end_and_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """An app's light threads end once idle (an app dropped leaves none behind) and start again
    with the next work."""
    monkeypatch.setattr(limits_module, "IDLE_THREAD_S", 0.05)
    pool = limits_module._Threads(2, "hyperscope-test-idle")

    def alive() -> int:
        return sum(t.name.startswith("hyperscope-test-idle") for t in threading.enumerate())

    ran: list[int] = []
    pool.submit(ran.append, 1).result(60)
    deadline = time.monotonic() + 60
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive() == 0
    pool.submit(ran.append, 2).result(60)
    assert ran == [1, 2]
