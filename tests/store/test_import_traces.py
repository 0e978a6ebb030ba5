"""Every real trace imports with nothing lost, and export gives back what the source held."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope._samples import H200_TRACE
from hyperscope.schema.events import EventKind
from tests.conftest import TRACE_SETS, shared_trace_set
from tests.tracejson import counts_by_kind, linked_in_source, linked_in_store, load, normalized_events


def _stored_counts(store: Store, job: str) -> Counter[tuple[str, str | None]]:
    con = store.profile(job).connect()
    rows = con.sql("SELECT ph, cat, count(*) FROM events GROUP BY ph, cat").fetchall()
    return Counter({(ph, cat): n for ph, cat, n in rows})


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TRACE_SETS))
def test_every_event_survives_import_and_export(store: Store, tmp_path: Path, name: str) -> None:
    files = shared_trace_set(name)
    report = store.import_traces(files, name)
    sources = {f: load(f) for f in files}

    expected = sum((counts_by_kind(t) for t in sources.values()), Counter())
    assert _stored_counts(store, name) == expected
    assert report.profile.events == sum(expected.values())

    # names, ns timestamps, durations, correlations, args and unknown fields: all of it, per rank
    written = store.export_chrome(name, tmp_path / f"{name}.json.gz")
    assert len(written) == len(files)
    by_rank = {m.source_file: m.rank for m in report.ranks}
    for source_path, source in sources.items():
        rank = by_rank[str(source_path)]
        out = next(p for p in written if len(written) == 1 or f".rank{rank}." in p.name)
        exported = load(out)
        assert normalized_events(exported) == normalized_events(source), f"{source_path} vs {out}"
        for key, value in source.items():
            if key != "traceEvents":
                assert exported.get(key) == value, f"header key {key} of {source_path}"


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TRACE_SETS))
def test_import_export_import_is_identical(store: Store, tmp_path: Path, name: str) -> None:
    store.import_traces(shared_trace_set(name), name)
    exported = store.export_chrome(name, tmp_path / "out.json")
    store.import_traces(exported, "again")
    columns = "* EXCLUDE (args, extra), json(args)::VARCHAR, json(extra)::VARCHAR"
    first = store.profile(name).connect().sql(f"SELECT {columns} FROM events ORDER BY ALL").fetchall()
    second = store.profile("again").connect().sql(f"SELECT {columns} FROM events ORDER BY ALL").fetchall()
    assert first == second


def test_generated_trace_round_trips(store: Store, tmp_path: Path, synth_job: list[Path]) -> None:
    report = store.import_traces(synth_job, "synth")
    assert sorted(m.rank for m in report.ranks) == [0, 1, 2, 3]
    written = store.export_chrome("synth", tmp_path / "synth.json")
    assert [p.name for p in written] == [f"synth.rank{r}.json" for r in range(4)]
    for source_path in synth_job:
        rank = int(source_path.name[4])
        assert normalized_events(load(tmp_path / f"synth.rank{rank}.json")) == normalized_events(
            load(source_path)
        )


@pytest.mark.shared
def test_dlrm_set_is_one_profile_of_eight_ranks_on_one_clock(store: Store) -> None:
    report = store.import_traces(shared_trace_set("dlrm"), "dlrm")
    assert sorted(m.rank for m in report.ranks) == list(range(8))
    assert {m.world_size for m in report.ranks} == {8}
    con = store.profile("dlrm").connect()
    starts = dict(con.sql("SELECT rank, min(ts_ns) FROM events WHERE kind = 'step' GROUP BY rank").fetchall())
    assert len(starts) == 8
    # one 8-GPU host: the ranks start their profiled step within milliseconds of each other
    assert max(starts.values()) - min(starts.values()) < 50_000_000
    assert min(starts.values()) > 1_600_000_000 * 10**9  # epoch nanoseconds, not relative time


@pytest.mark.shared
@pytest.mark.parametrize("name", ["dlrm", "ns_resolution", "df_index_resolver", "h100", "alexnet"])
def test_launches_and_device_ops_stay_linked(store: Store, name: str) -> None:
    files = shared_trace_set(name)
    store.import_traces(files, name)
    linked = linked_in_store(store.profile(name).connect())
    assert linked > 0
    assert linked == linked_in_source(files)


@pytest.mark.shared
def test_kinds_and_typed_columns_of_a_real_trace(store: Store) -> None:
    store.import_traces(shared_trace_set("df_index_resolver"), "dfi")
    con = store.profile("dfi").connect()
    kinds = dict(con.sql("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
    assert kinds[EventKind.MEMORY] == 28010
    assert kinds[EventKind.KERNEL] == 19370
    assert kinds[EventKind.STEP] == 5
    nccl = con.sql(
        "SELECT count(*), min(stream), max(stream) FROM events "
        "WHERE kind = 'kernel' AND name LIKE 'ncclKernel_AllReduce%'"
    ).fetchall()[0]
    assert nccl == (2020, 14, 14)
    memcpy = con.sql("SELECT DISTINCT memcpy_kind FROM events WHERE kind = 'memcpy'").fetchall()
    assert memcpy == [("DtoD",)]
    # typed columns took the values out of args: nothing is stored twice
    dup = con.sql("SELECT count(*) FROM events WHERE args LIKE '%\"correlation\"%'").fetchall()[0][0]
    assert dup == 0
    assert con.sql("SELECT count(*) FROM events WHERE kind = 'kernel' AND grid IS NULL").fetchall()[0][0] == 0


@pytest.mark.shared
def test_ns_precision_timestamps_keep_every_digit(store: Store) -> None:
    files = shared_trace_set("ns_resolution")
    store.import_traces(files, "ns")
    con = store.profile("ns").connect()
    # 1712195495519695.812 us in the source: float64 would give ...695.75
    row = con.sql(
        "SELECT ts_ns, dur_ns FROM events WHERE name = 'DivBackward1' AND ph = 'X' ORDER BY ts_ns LIMIT 1"
    ).fetchall()[0]
    assert row == (1712195495519695812, 53090)


def test_fresh_h200_trace_from_torch_2_11(store: Store, tmp_path: Path) -> None:
    """A trace this project recorded on an H200 (tests/data): runs everywhere, unlike ../shared."""
    report = store.import_traces([H200_TRACE], "h200")
    source = load(H200_TRACE)
    assert _stored_counts(store, "h200") == counts_by_kind(source)
    assert report.ranks[0].clock == "base_time_ns"
    con = store.profile("h200").connect()
    assert linked_in_store(con) == linked_in_source([H200_TRACE]) == 603 + 27 + 39
    driver_launched = con.sql(
        """SELECT count(*) FROM events k JOIN events d USING (rank, correlation)
           WHERE k.kind = 'kernel' AND d.kind = 'driver' AND d.name = 'cuLaunchKernelEx'"""
    ).fetchall()[0][0]
    assert driver_launched == 93
    out = store.export_chrome("h200", tmp_path / "h200.json")
    assert normalized_events(load(out[0])) == normalized_events(source)
