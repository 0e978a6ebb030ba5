"""An import's rows held in memory, or written out as parts past a size (``store._staged``), and
the events file written from either (``profile.write_events``): the same stored rows, figures and
bounds whichever way they went (a rank sorted by Arrow or by DuckDB), and a second,
harder-compressed write only where the first is over its budget."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hyperscope import Store
from hyperscope.schema.events import SORT_KEY
from hyperscope.store import _rankpool, _staged, profile
from hyperscope.store.synth import SynthSpec, write_job


def _import(tmp: Path, job: Path, name: str) -> tuple[Path, dict[str, object]]:
    with Store(tmp / name) as store:
        report = store.import_traces([job], "j")
        stored = store.profile("j", report.profile.id)
    meta = stored.meta
    figures = {"events": meta.events, "ts_min_ns": meta.ts_min_ns, "ts_max_ns": meta.ts_max_ns}
    figures["ranks"] = [(r.rank, r.events, r.clock, r.clock_offset_ns) for r in meta.ranks]
    return stored.path, figures


def _rows(path: Path) -> object:
    return pq.read_table(sorted((path / "events").glob("*.parquet"))).to_pylist()


@pytest.mark.parametrize(
    "ranks,pool,by_duckdb",
    [(1, False, False), (3, False, False), (3, True, False), (1, False, True), (3, True, True)],
)
def test_rows_written_out_as_parts_are_stored_as_rows_held_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: int, pool: bool, by_duckdb: bool
) -> None:
    monkeypatch.setattr(_rankpool, "single_threaded", lambda: True)  # an earlier test's threads
    monkeypatch.setattr(_rankpool, "POOL_MIN_BYTES", 0)  # the pool even for files this small
    if pool and _rankpool.processes_for(ranks) == 0:
        pytest.skip("worker processes need fork and 2 CPUs")
    monkeypatch.setattr(_rankpool, "single_threaded", lambda: pool)  # parts from workers, or none
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=ranks, steps=4, ops_per_step=60, seed=3), compress=True)
    held, held_figures = _import(tmp_path, job, "held")
    # every table added goes over the limit: the rows go to parts, sorted a rank at a time by
    # Arrow, or by DuckDB (a rank too large to hold)
    monkeypatch.setattr(_staged, "SPILL_BYTES", 1)
    if by_duckdb:
        monkeypatch.setattr(profile, "RANK_SORT_BYTES", 0)
    spilled, spilled_figures = _import(tmp_path, job, "spilled")
    assert spilled_figures == held_figures
    assert held_figures["events"] > 0
    want, got = _rows(held), _rows(spilled)
    assert len(got) == len(want)
    key = lambda r: repr(sorted(r.items()))  # noqa: E731 - rows that tie on the sort key may swap
    assert sorted(map(key, got)) == sorted(map(key, want))


def test_the_events_file_is_compressed_harder_only_over_its_budget(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=1, steps=6, ops_per_step=200, seed=4))
    files = {}
    for budget in (None, 1):
        staged = _staged.StagedRows(lambda: pytest.fail("no DuckDB for rows held in memory"), tmp_path)
        with Store(tmp_path / "s") as store:
            report = store.import_traces([job], f"j{budget}")
            table = pq.read_table(store.profile(f"j{budget}", report.profile.id).path / "events")
        staged.add(table)
        written = profile.write_events(staged, tmp_path / f"out-{budget}", {}, budget_bytes=budget)
        assert written.rows == table.num_rows
        files[budget] = tmp_path / f"out-{budget}" / "events" / "part-00000.parquet"
    assert files[1].stat().st_size < files[None].stat().st_size
    assert pq.read_table(files[1]).equals(pq.read_table(files[None]))


def test_figures_are_taken_as_rows_come_in(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=2, steps=3, ops_per_step=40, seed=8))
    with Store(tmp_path / "s") as store:
        report = store.import_traces([job], "j")
        table = pq.read_table(store.profile("j", report.profile.id).path / "events")
    staged = _staged.StagedRows(lambda: pytest.fail("no DuckDB for rows held in memory"), tmp_path)
    half = table.num_rows // 2
    staged.add(table.slice(0, half))
    staged.add(table.slice(half))
    for rank in (0, 1):
        mine = table.filter(table["rank"].to_numpy() == rank).to_pylist()
        timed = [r for r in mine if r["ph"] != "M"]
        ends = [r["ts_ns"] + (r["dur_ns"] or 0) for r in mine if r["ts_ns"] is not None]
        assert staged.figures[rank] == (len(mine), min(r["ts_ns"] for r in timed), max(ends))
    assert staged.rows == table.num_rows


def test_rows_past_a_row_group_are_written_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=2, steps=3, ops_per_step=40, seed=9))
    one, _ = _import(tmp_path, job, "one")
    monkeypatch.setattr(profile, "ROW_GROUP_ROWS", 100)
    many, _ = _import(tmp_path, job, "many")
    assert pq.ParquetFile(many / "events" / "part-00000.parquet").metadata.num_row_groups > 2
    rows = _rows(many)
    keys = [tuple(r[k] for k in SORT_KEY) for r in rows]
    assert keys == sorted(keys)  # each row group goes on where the one before ends
    assert sorted(map(repr, rows)) == sorted(map(repr, _rows(one)))
