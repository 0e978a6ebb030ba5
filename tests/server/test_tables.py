"""The Tables page's endpoint (every kernel, operator or annotation in scope, as the analysis
gives them) and the exact-name search a table's row opens the Timeline with."""

from __future__ import annotations

from pathlib import Path

import orjson
from fastapi.testclient import TestClient

from hyperscope.analysis import Scope
from hyperscope.analysis.tables import annotation_table, kernel_table
from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from tests.server.conftest import Home


def _json(table: object) -> object:
    return orjson.loads(orjson.dumps(table))


def test_tables_equal_the_analysis(client: TestClient, home: Home) -> None:
    profile = Profile.open(profile_dir(home.path, home.h200))
    got = client.get(f"/api/profiles/{home.h200}/tables/kernels").json()
    assert got == _json(kernel_table(profile).to_dict())
    got = client.get(f"/api/profiles/{home.h200}/tables/annotations?steps=3:7").json()
    assert got == _json(annotation_table(profile, Scope(steps=(3, 7))).to_dict())
    multi = client.get(f"/api/profiles/{home.multi}/tables/kernels?rank=1&rank=2").json()
    whole = Profile.open(profile_dir(home.path, home.multi))
    assert multi == _json(kernel_table(whole, Scope(ranks=(1, 2))).to_dict())
    assert client.get(f"/api/profiles/{home.h200}/tables/operators").json()["rows"] == []  # none captured


def test_bad_table_requests_answer_400(client: TestClient, home: Home) -> None:
    assert client.get(f"/api/profiles/{home.h200}/tables/threads").status_code == 400
    answer = client.get(f"/api/profiles/{home.h200}/tables/kernels?rank=7")
    assert answer.status_code == 400 and "rank" in answer.json()["detail"]


def test_exact_search_finds_one_name_only(client: TestClient, home: Home) -> None:
    base = f"/api/profiles/{home.h200}/timeline/search"
    rows = client.get(f"/api/profiles/{home.h200}/tables/kernels").json()["rows"]
    name, launches = rows[0]["name"], rows[0]["launches"]
    exact = client.get(base, params={"q": name, "exact": "true"}).json()
    assert exact["total"] == launches and {m["name"] for m in exact["matches"]} == {name}
    # a part of that name: the substring search finds it (and more), the exact one nothing
    part = name[: len(name) // 2]
    loose = client.get(base, params={"q": part}).json()
    assert loose["total"] >= launches
    assert client.get(base, params={"q": part, "exact": "true"}).json()["total"] == 0
    # a whole C++ name longer than 500 characters is a valid question
    assert client.get(base, params={"q": "x" * 2000, "exact": "true"}).json()["total"] == 0


def test_the_whole_memory_view_is_read_from_what_import_kept(tmp_path: Path) -> None:
    """`import` keeps a finished profile's whole memory view at the UI's defaults; the server reads
    it for exactly that request (held to its row cap) and computes every other scope."""
    from hyperscope import Store
    from hyperscope._samples import H200_TRACE
    from hyperscope.analysis import stored
    from hyperscope.analysis.memory_view import memory_view
    from hyperscope.server import create_app
    from hyperscope.store.derived import read_packed, write_packed
    from tests.server.conftest import local

    home = tmp_path / "home"
    with Store(home) as store:
        report = store.import_traces([H200_TRACE], "mem")
    profile = Profile.open(profile_dir(home, report.profile.id))
    stored.precompute_job(home, "mem")
    kept = stored.load_memory_view(profile)
    assert kept == _json({k: t.to_dict() for k, t in memory_view(profile).items()})
    assert kept is not None and kept["curve"]["rows"] and kept["allocations"]["rows"]
    # mark the kept answer: only the request it answers shows the mark
    path = stored.memory_view_path(profile)
    marked = orjson.loads(read_packed(path))
    marked["peaks"]["notes"] = ["read from the kept file"]
    write_packed(path, orjson.dumps(marked))
    base = f"/api/profiles/{report.profile.id}/memory"
    with local(create_app(home, static_dir=tmp_path / "no-bundle")) as client:
        assert client.get(base).json()["peaks"]["notes"] == ["read from the kept file"]
        for other in ("?steps=3:5", "?rank=0", "?buckets=50", "?top=3"):
            assert client.get(base + other).json()["peaks"]["notes"] != ["read from the kept file"], other
    with local(create_app(home, static_dir=tmp_path / "no-bundle", max_rows=5)) as capped:
        answer = capped.get(base)
        assert answer.status_code == 413 and "curve" in answer.json()["detail"]
    path.write_bytes(b"not zstd")  # a damaged file is computed again, not served
    with local(create_app(home, static_dir=tmp_path / "no-bundle")) as client:
        assert client.get(base).json() == kept


def test_the_whole_waits_and_filters_are_read_from_what_import_kept(tmp_path: Path) -> None:
    """The dashboard page asks the collectives' waits and the filters beside the dashboard: a
    finished profile's whole-profile answers are read from what `import` kept (the mark shows),
    a scoped one is computed, and a damaged file is computed again, not served."""
    from hyperscope import Store
    from hyperscope.analysis import stored
    from hyperscope.server import create_app
    from hyperscope.store.derived import read_packed, write_packed
    from hyperscope.store.synth import SynthSpec, write_job
    from tests.server.conftest import local

    home = tmp_path / "home"
    with Store(home) as store:
        report = store.import_traces(write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=3)), "kept")
    profile = Profile.open(profile_dir(home, report.profile.id))
    stored.precompute_job(home, "kept")
    waits, filters = stored.waits_path(profile), stored.filters_path(profile)
    computed = {"waits": stored.load_waits(profile), "filters": stored.load_filters(profile)}
    assert computed["filters"] is not None and computed["filters"]["ranks"] == [0, 1]
    assert computed["waits"] is not None
    marked_waits = orjson.loads(read_packed(waits)) | {"notes": ["read from the kept file"]}
    write_packed(waits, orjson.dumps(marked_waits))
    marked_filters = orjson.loads(read_packed(filters)) | {"annotations": ["kept-mark"]}
    write_packed(filters, orjson.dumps(marked_filters))
    base = f"/api/profiles/{report.profile.id}"
    with local(create_app(home, static_dir=tmp_path / "no-bundle")) as client:
        assert client.get(f"{base}/collectives/waits").json()["notes"] == ["read from the kept file"]
        assert client.get(f"{base}/collectives/waits?rank=0").json()["notes"] != ["read from the kept file"]
        assert client.get(f"{base}/filters").json()["annotations"] == ["kept-mark"]
    waits.write_bytes(b"not zstd")
    filters.write_bytes(b"not zstd")
    with local(create_app(home, static_dir=tmp_path / "no-bundle")) as client:
        assert client.get(f"{base}/collectives/waits").json() == computed["waits"]
        assert client.get(f"{base}/filters").json()["ranks"] == [0, 1]
