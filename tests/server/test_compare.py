"""GET /api/compare through the real app: two profiles, two ranks, two step ranges; answers are the
analysis' own (exact deltas on a slowed pair), bad parameters answer 400 naming them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope import Store
from hyperscope.analysis.groundtruth import GroundTruthSpec
from hyperscope.analysis.slowdown import write_slowed
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.store.profile import Profile, new_profile_id
from tests.server.conftest import add_generated, list_profile, local

SLOWED, D = "my_custom_fused_kernel", 20_000


def add_slowed(store: Store, job: str, source: str, slow: dict[str, int]) -> str:
    """Profile ``source`` with ``slow`` applied (analysis.slowdown), listed in the catalog as ``job``."""
    pid = new_profile_id()
    profile = write_slowed(Profile.open(profile_dir(store.home, source)), profile_dir(store.home, pid), slow)
    return list_profile(store, job, pid, profile)


@dataclass(frozen=True, slots=True)
class Pair:
    home: Path
    a: str
    b: str


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    home = tmp_path_factory.mktemp("compare") / "home"
    with Store(home) as store:
        a = add_generated(store, "before", GroundTruthSpec(ranks=2, steps=6))
        b = add_slowed(store, "after", a, {SLOWED: D})
    return Pair(home, a, b)


@pytest.fixture
def api(pair: Pair, tmp_path: Path) -> Iterator[TestClient]:
    with local(create_app(pair.home, static_dir=tmp_path / "no-bundle")) as c:
        yield c


def test_two_profiles(api: TestClient, pair: Pair) -> None:
    got = api.get("/api/compare", params={"a": pair.a, "b": pair.b})
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["labels"] == ["before", "after"] and body["cached"] is False
    assert (body["a"]["job"], body["b"]["job"]) == ("before", "after")
    assert body["summary"]["change_ns"] == 2 * D and body["summary"]["beyond_noise"] is True
    assert body["summary"]["line"].startswith("step time +") and SLOWED in body["summary"]["line"]
    top = body["tables"]["kernels"]["rows"][0]
    assert (top["name"], top["delta_mean_ns"], top["delta_per_step_ns"], top["share_pct"]) == (
        SLOWED,
        D,
        2 * D,
        100,
    )
    assert set(body["tables"]) == {
        "summary",
        "steps",
        "step_histogram",
        "step_pairs",
        "gpu_time",
        "kernels",
        "operators",
        "memory",
        "collectives",
    }
    again = api.get("/api/compare", params={"a": pair.a, "b": pair.b}).json()
    assert again["cached"] is True and again["summary"] == body["summary"]


def test_two_ranks_and_two_step_ranges_of_one_profile(api: TestClient, pair: Pair) -> None:
    ranks = api.get("/api/compare", params={"a": pair.a, "rank_a": 0, "rank_b": 1}).json()
    assert ranks["labels"] == ["before rank 0", "before rank 1"] and ranks["b"]["ranks"] == [1]
    assert ranks["summary"]["change_ns"] == 0
    steps = api.get("/api/compare", params={"a": pair.a, "steps_a": "0:2", "steps_b": "3:5"}).json()
    assert (steps["a"]["steps"], steps["b"]["steps"]) == ([0, 2], [3, 5])
    assert steps["summary"]["steps_a"] == steps["summary"]["steps_b"] == 6


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"b": "x"}, 400, "parameter 'a'"),
        ({"a": "ffffffffffffffff"}, 404, "ffffffffffffffff"),
        ({"steps_a": "7:3"}, 400, "steps_a '7:3'"),
        ({"rank_b": "one"}, 400, "parameter 'rank_b'"),
        ({"rank_b": 9}, 400, "rank 9: not in this profile"),
    ],
)
def test_bad_parameters(
    api: TestClient, pair: Pair, params: dict[str, object], code: int, message: str
) -> None:
    if "a" not in params and "b" not in params:
        params = {"a": pair.a, **params}
    got = api.get("/api/compare", params=params)
    assert got.status_code == code, got.text
    assert message in got.json()["detail"]


def test_two_whole_profiles_with_kept_dashboards_answer_the_same(pair: Pair, tmp_path: Path) -> None:
    """Two whole finished profiles whose dashboards import kept run side by side from those: the
    answer is the one computed without them."""
    from hyperscope.analysis import stored

    params = {"a": pair.a, "b": pair.b}
    profiles = [Profile.open(profile_dir(pair.home, p)) for p in (pair.a, pair.b)]
    for profile in profiles:
        stored.dashboard_path(profile).unlink(missing_ok=True)
    with local(create_app(pair.home, static_dir=tmp_path / "a", prewarm=0)) as c:
        computed = c.get("/api/compare", params=params).json()
    for profile in profiles:
        stored.precompute_dashboard(profile)
    with local(create_app(pair.home, static_dir=tmp_path / "b", prewarm=0)) as c:
        kept = c.get("/api/compare", params=params).json()
    assert kept["cached"] is False and kept["tables"] == computed["tables"]
    assert kept["summary"] == computed["summary"]
