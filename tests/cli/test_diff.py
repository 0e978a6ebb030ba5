"""`hyperscope diff`, end to end as a user runs it: the summary line first, tables, JSON, scopes
(two jobs, two ranks, two step ranges) and bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.store.synth import SynthSpec, write_job
from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diff")
    with Store(root / "home") as store:
        for job, seed in (("base", 0), ("new", 1)):
            store.import_traces(write_job(root / job, SynthSpec(ranks=2, steps=6, seed=seed)), job)
    return root / "home"


def test_diff_prints_the_summary_line_first_then_the_tables(home: Path) -> None:
    text = run(home, "diff", "base", "new").stdout
    first = text.splitlines()[0]
    assert first.startswith("step time ") and "% (" in first and "noise" in first
    for title in (
        "Step time",
        "GPU time",
        "Kernels, by how much",
        "CPU operators",
        "Peak GPU memory",
        "Communication per collective",
    ):
        assert title in text, title
    assert "ncclKernel_AllReduce" in text


def test_diff_json_matches_the_analysis_and_scopes(home: Path) -> None:
    got = json.loads(run(home, "diff", "base", "new", "--json").stdout)
    assert got["labels"] == ["base", "new"]
    summary = got["summary"]
    steps = {r["group"]: r for r in got["tables"]["steps"]["rows"]}
    assert summary["change_ns"] == pytest.approx(steps["new"]["p50_ns"] - steps["base"]["p50_ns"])
    assert summary["beyond_noise"] in (True, False)
    kernels = got["tables"]["kernels"]["rows"]
    assert kernels and all(k["match"] in ("name", "normalised", "only A", "only B") for k in kernels)
    ranks = json.loads(run(home, "diff", "base", "--rank", "0", "--against-rank", "1", "--json").stdout)
    assert ranks["labels"] == ["base rank 0", "base rank 1"]
    same = json.loads(run(home, "diff", "base", "base", "--steps", "1:4", "--json").stdout)
    assert same["summary"]["change_ns"] == 0 and same["summary"]["steps_a"] == 8
    assert all(r["delta_total_ns"] == 0 for r in same["tables"]["kernels"]["rows"])
    ranges = json.loads(
        run(home, "diff", "base", "--steps", "1:2", "--against-steps", "3:4", "--json").stdout
    )
    assert (ranges["summary"]["steps_a"], ranges["summary"]["steps_b"]) == (4, 4)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["base", "new", "--steps", "seven"], 2, "--steps 'seven'"),
        (["base", "new", "--against-rank", "9"], 2, "rank 9: not in this profile"),
        (["base", "nope"], 1, "no job named or numbered 'nope'"),
        (["base@", "new"], 2, "expected JOB or JOB@PROFILE"),
        (["base@0000", "new"], 2, "has no profile '0000'"),
    ],
)
def test_diff_bad_values_name_the_field(home: Path, args: list[str], code: int, message: str) -> None:
    proc = run(home, "diff", *args, ok=False)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr
