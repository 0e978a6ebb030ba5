"""The timeline's collective endpoints through the real app: ``/collective`` (a selected kernel's
collective on every rank, the last to arrive) and ``/collectives`` (those in a window), on the
hand-made three-rank profile of tests/timeline/test_collectives.py, with every parameter
range-checked and the server's row cap applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hyperscope import Store
from hyperscope.server import create_app
from tests.server.conftest import local
from tests.timeline.test_collectives import ALLREDUCE, write_collectives

BASE = "/api/profiles/{}/timeline"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("srv-coll")
    with Store(root / "home") as store:
        pid = store.import_traces(write_collectives(root / "traces"), "collectives").profile.id
    return root / "home", pid


@pytest.fixture
def client(served: tuple[Path, str], tmp_path: Path) -> Iterator[TestClient]:
    with local(create_app(served[0], static_dir=tmp_path / "no-bundle")) as c:
        yield c


def _all(client: TestClient, pid: str, **params: Any) -> Any:
    r = client.get(
        BASE.format(pid) + "/collectives",
        params={"rows": "stream/0/0/7,stream/1/1/7,stream/1/1/8,stream/2/2/7", **params},
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_a_selected_kernel_gives_its_collective_on_every_rank(
    client: TestClient, served: tuple[Path, str]
) -> None:
    pid = served[1]
    span = {"t0_ns": 0, "t1_ns": 2**62}  # the whole run (its index is built at the first request)
    every = _all(client, pid, **span)
    assert every["total"] == 8 and not every["truncated"] and len(every["instances"]) == 8
    second = every["instances"][2]  # the second all-reduce: rank 2 arrived 100 µs late
    assert (second["collective"], second["seq"]) == ("AllReduce", 1)
    # a click on rank 1's kernel (event id and row, as the UI asks) gives the same instance
    member = second["events"][1]
    got = client.get(
        BASE.format(pid) + "/collective", params={"id": member["id"], "row": member["row"]}
    ).json()
    assert got["id"] == member["id"] and got["instance"] == second
    inst = got["instance"]
    assert inst["last"] == {"rank": 2, "id": inst["events"][2]["id"], "after_first_ns": 100_000}
    assert [e["rank"] for e in inst["events"]] == [0, 1, 2] and inst["events"][0]["name"] == ALLREDUCE
    assert all(isinstance(e["ts_ns"], str) for e in inst["events"])  # exact epoch ns, as elsewhere
    # the row is only a hint: without it, or with a wrong one, the same answer
    assert client.get(BASE.format(pid) + "/collective", params={"id": member["id"]}).json() == got
    wrong = {"id": member["id"], "row": "stream/0/0/7"}
    assert client.get(BASE.format(pid) + "/collective", params=wrong).json() == got
    # a kernel that is no collective: no instance
    event = client.get(BASE.format(pid) + "/event", params={"id": member["id"] + 1}).json()
    assert event["fields"]["name"] != ALLREDUCE
    plain = client.get(BASE.format(pid) + "/collective", params={"id": member["id"] + 1}).json()
    assert plain == {"id": member["id"] + 1, "instance": None}
    # the limit keeps the first instances by start
    first2 = _all(client, pid, limit=2, **span)
    assert first2["total"] == 8 and first2["truncated"] and first2["instances"] == every["instances"][:2]


@pytest.mark.parametrize(
    ("path", "params", "status", "word"),
    [
        ("/collective", {"id": -1}, 400, "'id'"),
        ("/collective", {"id": "x"}, 400, "'id'"),
        ("/collective", {}, 400, "'id'"),
        ("/collective", {"id": 1 << 40}, 404, "no such event"),
        ("/collectives", {"rows": "", "t0_ns": 0, "t1_ns": 5}, 400, "rows"),
        ("/collectives", {"rows": ",".join(["r"] * 300), "t0_ns": 0, "t1_ns": 5}, 400, "rows"),
        ("/collectives", {"rows": "stream/0/0/7", "t0_ns": 5, "t1_ns": 5}, 400, "t1_ns"),
        ("/collectives", {"rows": "stream/0/0/7", "t0_ns": 2**63, "t1_ns": 5}, 400, "'t0_ns'"),
        ("/collectives", {"rows": "stream/0/0/7", "t0_ns": 0, "t1_ns": 5, "limit": 0}, 400, "'limit'"),
        ("/collectives", {"rows": "stream/0/0/7", "t0_ns": 0, "t1_ns": 5, "limit": 501}, 400, "'limit'"),
    ],
)
def test_bad_parameters_are_named(
    client: TestClient, served: tuple[Path, str], path: str, params: dict[str, Any], status: int, word: str
) -> None:
    r = client.get(BASE.format(served[1]) + path, params=params)
    assert r.status_code == status, r.text
    assert word in r.json()["detail"]


def test_the_row_cap_applies_to_the_kernels_answered(served: tuple[Path, str], tmp_path: Path) -> None:
    home, pid = served
    params = {"rows": "stream/0/0/7", "t0_ns": 0, "t1_ns": 2**62}
    with local(create_app(home, static_dir=tmp_path / "none", max_rows=5)) as c:
        r = c.get(BASE.format(pid) + "/collectives", params=params)
        assert r.status_code == 413 and "--max-rows" in r.json()["detail"]
        ok = c.get(BASE.format(pid) + "/collectives", params={**params, "limit": 1})
        assert ok.status_code == 200 and len(ok.json()["instances"][0]["events"]) == 3
