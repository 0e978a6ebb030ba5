"""An import's rows held in memory, or written out as parts past a size (``store._staged``), and
the events file written from either (``profile.write_events``): the same stored rows, figures and
bounds whichever way they went (sorted whole by Arrow, or parts sorted as written and merged), and a second,
harder-compressed write only where the first is over its budget."""

from __future__ import annotations

import contextlib
import itertools
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hyperscope import Store
from hyperscope.schema.events import SORT_KEY
from hyperscope.store import _parts, _rankpool, _staged, profile
from hyperscope.store.synth import SynthSpec, write_job


def _import(tmp: Path, job: Path, name: str) -> tuple[Path, dict[str, object]]:
    with Store(tmp / name) as store:
        report = store.import_traces([job], "j")
        stored = store.profile("j", report.profile.id)
    meta = stored.meta
    figures = {"events": meta.events, "ts_min_ns": meta.ts_min_ns, "ts_max_ns": meta.ts_max_ns}
    figures["ranks"] = [(r.rank, r.events, r.clock, r.clock_offset_ns) for r in meta.ranks]
    return stored.path, figures


def _rows(path: Path) -> list[dict[str, object]]:
    return pq.read_table(sorted((path / "events").glob("*.parquet"))).to_pylist()


def _keys(rows: list[dict[str, object]]) -> list[tuple[tuple[bool, object], ...]]:
    """Each row's sort key, a null after every value (as Arrow sorts)."""
    return [tuple((r[k] is None, r[k] if r[k] is not None else 0) for k in SORT_KEY) for r in rows]


@pytest.mark.parametrize(
    "ranks,pool,sort",
    [(1, False, "whole"), (3, False, "whole"), (3, True, "whole"), (1, False, "runs"), (3, True, "runs")],
)
def test_rows_written_out_as_parts_are_stored_as_rows_held_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: int, pool: bool, sort: str
) -> None:
    monkeypatch.setattr(_rankpool, "single_threaded", lambda: True)  # an earlier test's threads
    monkeypatch.setattr(_rankpool, "POOL_MIN_BYTES", 0)  # the pool even for files this small
    if pool and _rankpool.processes_for(ranks) == 0:
        pytest.skip("worker processes need fork and 2 CPUs")
    monkeypatch.setattr(_rankpool, "single_threaded", lambda: pool)  # parts from workers, or none
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=ranks, steps=4, ops_per_step=60, seed=3), compress=True)
    held, held_figures = _import(tmp_path, job, "held")
    # every table added goes over the limit: the rows go to parts, then each rank is sorted whole
    # by Arrow, or (a rank too large for that) merged from parts written sorted ("runs")
    monkeypatch.setattr(_staged, "SPILL_BYTES", 1)
    writes = {"_write": 0, "_write_run": 0}
    for name in writes:
        monkeypatch.setattr(_staged, name, _counted(getattr(_staged, name), writes, name))
    if sort != "whole":  # merged in small row groups: many rounds, many batches
        monkeypatch.setattr(_staged, "RANK_SORT_BYTES", 0)
        monkeypatch.setattr(profile, "ROW_GROUP_ROWS", 50)
        monkeypatch.setattr(_parts, "RUN_GROUP_ROWS", 7)
    spilled, spilled_figures = _import(tmp_path, job, "spilled")
    assert spilled_figures == held_figures
    assert held_figures["events"] > 0
    want, got = _rows(held), _rows(spilled)
    assert len(got) == len(want)
    key = lambda r: repr(sorted(r.items()))  # noqa: E731 - rows that tie on the sort key may swap
    assert sorted(map(key, got)) == sorted(map(key, want))
    assert _keys(got) == sorted(_keys(got))
    if sort != "whole":
        assert pq.ParquetFile(spilled / "events" / "part-00000.parquet").metadata.num_row_groups > ranks
    if not pool:  # in this process: which way each part went
        assert (writes["_write"] > 0, writes["_write_run"] > 0) == (sort == "whole", sort == "runs")


def test_parts_written_before_a_rank_was_large_are_sorted_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=1, steps=6, ops_per_step=80, seed=5))
    with Store(tmp_path / "s") as store:
        report = store.import_traces([job], "j")
        table = pq.read_table(store.profile("j", report.profile.id).path / "events")
    shuffled = table.take(pa.array(random.Random(1).sample(range(table.num_rows), table.num_rows)))
    cuts = [i * table.num_rows // 3 for i in range(4)]
    thirds = [shuffled.slice(a, b - a) for a, b in itertools.pairwise(cuts)]
    staged = _staged.StagedRows(tmp_path / "work", spill_bytes=1)
    (tmp_path / "work").mkdir()
    staged.add(thirds[0])  # a small rank so far: written as it came
    monkeypatch.setattr(_staged, "RANK_SORT_BYTES", 0)  # now large: written sorted
    staged.add(thirds[1])
    staged.add(thirds[2])
    monkeypatch.setattr(profile, "ROW_GROUP_ROWS", 64)
    monkeypatch.setattr(_parts, "RUN_GROUP_ROWS", 16)
    written = profile.write_events(staged, tmp_path / "out", {})
    got = pq.read_table(tmp_path / "out" / "events")
    assert written.rows == got.num_rows == table.num_rows
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, table.to_pylist()))
    assert _keys(got.to_pylist()) == sorted(_keys(got.to_pylist()))
    assert sorted(p.name for p in (tmp_path / "work").iterdir())[0].startswith("run-spill-")


def _counted(fn: Callable[..., None], counts: dict[str, int], name: str) -> Callable[..., None]:
    def call(*args: object) -> None:
        counts[name] += 1
        fn(*args)

    return call


def test_the_events_file_is_compressed_harder_only_over_its_budget(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=1, steps=6, ops_per_step=200, seed=4))
    files = {}
    for budget in (None, 1):
        staged = _staged.StagedRows(tmp_path)
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
    staged = _staged.StagedRows(tmp_path)
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
    keys = _keys(rows)
    assert keys == sorted(keys)  # each row group goes on where the one before ends
    assert sorted(map(repr, rows)) == sorted(map(repr, _rows(one)))


class _FailingWriter:
    """A Parquet writer whose disk fills at its second row group."""

    def __init__(self) -> None:
        self.groups = 0
        self.closed = False

    def write_table(self, table: pa.Table, row_group_size: int) -> None:
        self.groups += 1
        if self.groups == 2:
            raise OSError(28, "No space left on device")

    def close(self) -> None:
        self.closed = True


def test_a_write_behind_that_fails_raises_in_the_caller_and_never_hangs() -> None:
    failing = _FailingWriter()
    behind = profile._Behind(failing)  # type: ignore[arg-type]
    table = pa.table({"x": [1, 2, 3]})
    with contextlib.suppress(OSError):  # the error surfaces at a later write, if the thread is quick
        for _ in range(50):
            behind.write_table(table)
    with pytest.raises(OSError, match="No space left"):  # and always at close, the file closed
        behind.close()
    assert failing.closed and failing.groups == 2  # nothing written after the error
