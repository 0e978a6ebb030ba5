"""The export endpoint: a rank as Chrome-trace JSON, several as a ZIP of one file per rank, a
window cut to the events overlapping it; what it writes is what is stored."""

from __future__ import annotations

import io
import json
import zipfile

from fastapi.testclient import TestClient

from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from tests.server.conftest import Home


def _stored(home: Home, pid: str, sql: str) -> int:
    con = Profile.open(profile_dir(home.path, pid)).connect()
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def test_one_rank_is_one_chrome_trace_file(client: TestClient, home: Home) -> None:
    answer = client.get(f"/api/profiles/{home.h200}/export")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert (
        answer.headers["content-disposition"]
        == f'attachment; filename="h200-transformer-{home.h200}-rank0.json"'
    )
    trace = json.loads(answer.content)
    assert len(trace["traceEvents"]) == _stored(home, home.h200, "SELECT count(*) FROM events")
    assert trace["deviceProperties"][0]["name"] == "NVIDIA H200"


def test_a_window_keeps_the_events_overlapping_it(client: TestClient, home: Home) -> None:
    meta = Profile.open(profile_dir(home.path, home.h200)).meta
    assert meta.ts_min_ns is not None and meta.ts_max_ns is not None
    start = meta.ts_min_ns + (meta.ts_max_ns - meta.ts_min_ns) // 3
    end = start + (meta.ts_max_ns - meta.ts_min_ns) // 10
    answer = client.get(f"/api/profiles/{home.h200}/export?start_ns={start}&end_ns={end}")
    assert answer.status_code == 200
    assert answer.headers["content-disposition"].endswith(f'-rank0-window-{start}-{end}.json"')
    events = json.loads(answer.content)["traceEvents"]
    want = _stored(
        home,
        home.h200,
        f"SELECT count(*) FROM events WHERE ph = 'M' OR ts_ns IS NULL "
        f"OR (ts_ns < {end} AND ts_ns + coalesce(dur_ns, 0) >= {start})",
    )
    whole = _stored(home, home.h200, "SELECT count(*) FROM events")
    assert len(events) == want and 0 < want < whole
    # every metadata event (process and thread names) is kept, whatever its timestamp
    assert sum(e["ph"] == "M" for e in events) == _stored(
        home, home.h200, "SELECT count(*) FROM events WHERE ph = 'M'"
    )


def test_several_ranks_are_a_zip_of_one_file_each(client: TestClient, home: Home) -> None:
    answer = client.get(f"/api/profiles/{home.multi}/export")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        names = zf.namelist()
        assert [n.split("/")[-1] for n in names] == [f"rank{r}.pt.trace.json" for r in range(4)]
        counts = [len(json.loads(zf.read(n))["traceEvents"]) for n in names]
    assert counts == [
        _stored(home, home.multi, f"SELECT count(*) FROM events WHERE rank = {r}") for r in range(4)
    ]
    two = client.get(f"/api/profiles/{home.multi}/export?rank=2")
    assert two.headers["content-type"] == "application/json"
    assert json.loads(two.content)["distributedInfo"]["rank"] == 2


def test_bad_export_parameters_answer_400(client: TestClient, home: Home) -> None:
    for query, words in (
        ("rank=9", "rank 9: the profile has ranks 0, 1, 2, 3"),
        ("start_ns=5", "give both"),
        ("start_ns=5&end_ns=5", "end_ns 5: expected after start_ns 5"),
    ):
        answer = client.get(f"/api/profiles/{home.multi}/export?{query}")
        assert answer.status_code == 400 and words in answer.json()["detail"], (query, answer.json())
    assert client.get("/api/profiles/0123456789abcdef/export").status_code == 404
