"""The server's one DuckDB database: each analysis on a connection of its own, its views its own."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from hyperscope.analysis import dashboard
from hyperscope.schema.layout import profile_dir
from hyperscope.server.analysis_db import AnalysisDatabase
from hyperscope.store.profile import Profile
from tests.server.conftest import Home


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    return str(con.execute("SELECT current_setting(?)", [name]).fetchall()[0][0])


def test_profiles_analysed_at_once_each_see_their_own_events(home: Home) -> None:
    """Three profiles' connections open at once on one database (one spill folder, a global
    setting of DuckDB's, for all): each ``events`` view is its own (temporary) one, and an
    analysis gives what it gives on a database of its own."""
    profiles = [Profile.open(profile_dir(home.path, pid)) for pid in (home.h200, home.multi, home.big)]
    expected = {
        p.path.name: p.connect().execute("SELECT count(*) FROM events").fetchall()[0][0] for p in profiles
    }
    assert len(set(expected.values())) == 3, "the test needs profiles of different sizes"
    db = AnalysisDatabase()
    seen: dict[str, int] = {}
    spills: set[str] = set()
    inside = threading.Barrier(3, timeout=60)

    def count(profile: Profile) -> None:
        with db.connection(profile) as con:
            inside.wait()  # all three connections are open at once
            seen[profile.path.name] = con.execute("SELECT count(*) FROM events").fetchall()[0][0]
            spills.add(_setting(con, "temp_directory"))
            inside.wait()

    threads = [threading.Thread(target=count, args=(p,)) for p in profiles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert seen == expected
    assert len(spills) == 1
    multi = profiles[1]
    with db.connection(multi) as con:
        shared = dashboard(con)
    assert {k: t.to_dict() for k, t in shared.items()} == {
        k: t.to_dict() for k, t in dashboard(multi).items()
    }
    db.close()


def test_the_limit_is_the_largest_asked_and_spill_goes_to_a_folder_removed_at_close(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory limit of every analysis together: the default of the largest profile analysed
    so far (never lowered by a smaller one); spill in a temporary folder of the server's own
    (never the store), removed when the database closes."""
    import hyperscope.server.analysis_db as module

    small = Profile.open(profile_dir(home.path, home.multi))
    big = Profile.open(profile_dir(home.path, home.big))
    monkeypatch.setattr(
        module, "memory_limit_bytes", lambda events: 2 * 10**9 if events == big.meta.events else 10**9
    )
    db = AnalysisDatabase()
    with db.connection(small) as con:
        assert _setting(con, "memory_limit") == "953.6 MiB"  # DuckDB's 1GB: 10⁹ bytes
        spill = Path(_setting(con, "temp_directory"))
    assert spill.is_dir() and not spill.is_relative_to(home.path)
    with db.connection(big) as con:
        assert _setting(con, "memory_limit") == "1.8 GiB"
    with db.connection(small) as con:
        assert _setting(con, "memory_limit") == "1.8 GiB"
    db.close()
    assert not spill.exists()


def test_a_fresh_database_every_so_many_analyses_the_old_closed_by_its_last_connection(
    home: Home,
) -> None:
    """A database kept for the server's life keeps something of every temp table made on it, so
    after ``per_database`` connections the next opens on a fresh database; one still in use keeps
    working until it closes, and only then is its database closed (its spill folder removed)."""
    profile = Profile.open(profile_dir(home.path, home.multi))
    expected = profile.connect().execute("SELECT count(*) FROM events").fetchall()[0][0]
    db = AnalysisDatabase(per_database=2)
    with db.connection(profile) as first:
        first_spill = Path(_setting(first, "temp_directory"))
        with db.connection(profile) as second:
            assert Path(_setting(second, "temp_directory")) == first_spill
        with db.connection(profile) as third:  # the first database handed out its two
            assert db.opened == 2
            third_spill = Path(_setting(third, "temp_directory"))
            assert third_spill != first_spill
            assert third.execute("SELECT count(*) FROM events").fetchall()[0][0] == expected
        # the first connection, opened before the renewal, still answers on its database
        assert first_spill.is_dir()
        first.execute("CREATE TEMP TABLE t AS SELECT * FROM events")
        assert first.execute("SELECT count(*) FROM t").fetchall()[0][0] == expected
    assert not first_spill.exists(), "closed with its last connection"
    assert third_spill.is_dir(), "the current database stays open between analyses"
    db.close()
    assert not third_spill.exists()


def test_renewal_turned_off_or_set_by_the_environment(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HYPERSCOPE_ANALYSES_PER_DATABASE``: 0 keeps one database for the server's life (what the
    server did before), a number sets the share, anything else is refused by name."""
    from hyperscope.server.analysis_db import ANALYSES_PER_DATABASE, ANALYSES_PER_DATABASE_ENV

    profile = Profile.open(profile_dir(home.path, home.multi))
    monkeypatch.delenv(ANALYSES_PER_DATABASE_ENV, raising=False)
    assert AnalysisDatabase().per_database == ANALYSES_PER_DATABASE
    monkeypatch.setenv(ANALYSES_PER_DATABASE_ENV, "0")
    db = AnalysisDatabase()
    for _ in range(5):
        with db.connection(profile) as con:
            con.execute("SELECT 1").fetchall()
    assert db.opened == 1
    db.close()
    monkeypatch.setenv(ANALYSES_PER_DATABASE_ENV, "3")
    assert AnalysisDatabase().per_database == 3
    for bad in ("-1", "many"):
        monkeypatch.setenv(ANALYSES_PER_DATABASE_ENV, bad)
        with pytest.raises(ValueError, match=ANALYSES_PER_DATABASE_ENV):
            AnalysisDatabase()


def test_free_pages_are_handed_back_when_a_database_closes() -> None:
    """glibc's ``malloc_trim`` is found and called (this suite runs on glibc Linux)."""
    from hyperscope._proc import trim_malloc

    assert trim_malloc() is True
