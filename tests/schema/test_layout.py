"""Profile metadata: compact, round-trips, and says clearly when it is from a newer hyperscope."""

import json
from pathlib import Path

import pytest

from hyperscope import StoreError
from hyperscope.schema import SCHEMA_VERSION, ProfileMeta, RankMeta

DEVICES = [{"id": 0, "name": "NVIDIA H200"}, {"id": 1, "name": "NVIDIA H200"}]


def _meta() -> ProfileMeta:
    ranks = [RankMeta(rank=r, node="n0", device_properties=DEVICES) for r in range(4)]
    return ProfileMeta(profile_id="p", source="import", created_ns=1, ranks=ranks, events=10)


def test_round_trip_stores_each_device_list_once(tmp_path: Path) -> None:
    text = _meta().to_json()
    assert text.count("NVIDIA H200") == 2  # four ranks, one shared list
    assert ProfileMeta.from_json(text, tmp_path / "meta.json") == _meta()


def test_unknown_keys_are_ignored_and_newer_versions_refused(tmp_path: Path) -> None:
    raw = json.loads(_meta().to_json())
    raw["future_field"] = 1
    raw["ranks"][0]["future_rank_field"] = 2
    assert ProfileMeta.from_json(json.dumps(raw), tmp_path / "meta.json") == _meta()
    raw["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(StoreError, match="Upgrade hyperscope"):
        ProfileMeta.from_json(json.dumps(raw), tmp_path / "meta.json")
