"""The Tables page's endpoint (every kernel, operator or annotation in scope, as the analysis
gives them) and the exact-name search a table's row opens the Timeline with."""

from __future__ import annotations

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
