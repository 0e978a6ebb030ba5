"""`hyperscope report`, end to end as a user runs it: tables, JSON, scopes and bad values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("report") / "home"
    run(home, "demo", "--synthetic", "--no-serve", "--ranks", "2", "--steps", "4")
    return home


def test_report_prints_the_dashboard(home: Path) -> None:
    text = run(home, "report", "demo").stdout
    for title in (
        "GPU time per GPU",
        "GPU time, whole job",
        "GPU idle time by cause",
        "Step time per rank",
        "Top 15 GPU kernels by time",
        "Ranks compared",
    ):
        assert text.count(title) == 1, title
    assert "ncclKernel_AllReduce" in text
    # no note twice, no column called "group"
    notes = [line.strip() for line in text.splitlines() if line.strip().startswith("note:")]
    assert len(notes) == len(set(notes))
    # honest plurals: one of a thing is never "things" (the "1 kernel names match")
    for note in notes:
        assert not re.search(r"(?<![\d.,])1 (\w+ )?(names|ranks|kernels|launches|steps)\b", note), note
    assert "1 kernel name matches no precision rule and is counted as 'other'" in text
    assert " group " not in text and "│ group" not in text


def test_report_json_scoped_to_a_rank_and_steps(home: Path) -> None:
    whole = json.loads(run(home, "report", "demo", "--json").stdout)
    part = json.loads(run(home, "report", "demo", "--json", "--rank", "1", "--steps", "1:2").stdout)
    assert part["ranks"] == [1] and part["steps"] == [1, 2]
    assert [r["group"] for r in part["tables"]["gpu_time"]["rows"]] == ["1"]
    assert part["tables"]["steps_job"]["rows"][0]["steps"] == 2
    busy = {r["group"]: r["busy_ns"] for r in whole["tables"]["gpu_time"]["rows"]}
    assert 0 < part["tables"]["gpu_time"]["rows"][0]["busy_ns"] < busy["1"]


def test_report_hta_tables(home: Path) -> None:
    tables = json.loads(run(home, "report", "demo", "--json", "--hta").stdout)["tables"]
    assert {r["rank"] for r in tables["hta_temporal"]["rows"]} == {0, 1}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--steps", "seven"], 2, "--steps 'seven'"),
        (["--steps", "5:2"], 2, "--steps '5:2'"),
        (["--rank", "9"], 2, "rank 9: not in this profile"),
        (["--top", "0"], 2, "--top 0"),
        (["--hta", "--rank", "0"], 2, "--hta covers the whole profile"),
        (["--annotation", "nope"], 2, "annotation 'nope': none in scope"),
    ],
)
def test_report_bad_values_name_the_field(home: Path, args: list[str], code: int, message: str) -> None:
    proc = run(home, "report", "demo", *args, ok=False)
    assert proc.returncode == code and message in proc.stderr, proc.stderr


def test_report_unknown_job(home: Path) -> None:
    proc = run(home, "report", "nope", ok=False)
    assert proc.returncode == 1 and "no job named" in proc.stderr


def test_report_help(home: Path) -> None:
    text = run(home, "report", "--help").stdout
    assert "--steps" in text and "--json" in text and "--home" in text


def test_report_annotation_on_a_real_trace(tmp_path: Path) -> None:
    from tests.conftest import shared_trace_set

    files = shared_trace_set("dlrm")
    run(tmp_path, "import", *map(str, files), "--job", "dlrm")
    tables = json.loads(run(tmp_path, "report", "dlrm", "--json", "--annotation", "## forward ##").stdout)[
        "tables"
    ]
    stats = tables["annotation"]["rows"]
    assert [r["name"] for r in stats] == ["## forward ##"] and stats[0]["count"] == 8  # one per rank
    assert sum(b["count"] for b in tables["annotation_histogram"]["rows"]) == 8
