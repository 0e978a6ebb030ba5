"""Several rank files imported by worker processes (``store._rankpool``): the same stored profile as
one process, a bad file or a dead worker failing the whole import with nothing stored, Ctrl-C
stopping every worker."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest

from hyperscope import Store
from hyperscope.errors import StoreError, TraceFormatError
from hyperscope.schema.layout import PROFILES_DIR
from hyperscope.store import _rankpool, importer
from hyperscope.store.synth import SynthSpec, write_job, write_rank

pytestmark = pytest.mark.skipif(
    "fork" not in __import__("multiprocessing").get_all_start_methods() or len(os.sched_getaffinity(0)) < 2,
    reason="needs fork and 2 CPUs",
)


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test process may run other threads (an earlier test's DuckDB); these tests fork on purpose,
    with files far smaller than an import forks for."""
    monkeypatch.setattr(_rankpool, "single_threaded", lambda: True)
    monkeypatch.setattr(_rankpool, "POOL_MIN_BYTES", 0)


def test_no_fork_while_other_threads_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real check
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not _rankpool.single_threaded()
        assert _rankpool.processes_for(8) == 0  # staged in this process: no fork under a held lock
    finally:
        stop.set()
        other.join()


def _stored(store: Store, job: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    profile = store.profile(job)
    table = pq.read_table(sorted((profile.path / "events").glob("*.parquet")))
    rows = sorted(table.to_pylist(), key=repr)
    ranks = [
        {k: v for k, v in dataclasses.asdict(r).items() if k != "source_file"} for r in profile.meta.ranks
    ]
    return rows, ranks


def _nothing_stored(home: Path) -> None:
    with Store(home) as store:
        assert store.jobs() == []
    assert list((home / PROFILES_DIR).iterdir()) == []  # no profile, no staging directory left


def test_processes_for_one_per_cpu_and_file(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _rankpool.processes_for(1) == 0  # one file: staged in this process
    assert _rankpool.processes_for(8) == min(8, len(os.sched_getaffinity(0)))
    monkeypatch.setattr(_rankpool, "POOL_MIN_BYTES", 32 << 20)
    assert _rankpool.processes_for(8, 7 << 20) == 0  # small files: in this process
    assert _rankpool.processes_for(8, 64 << 20) == min(8, len(os.sched_getaffinity(0)))


def test_split_balances_sizes_and_keeps_order() -> None:
    groups = _rankpool.split([5, 1, 1, 1, 4, 2], 2)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(g == sorted(g) for g in groups)
    assert sorted(sum([5, 1, 1, 1, 4, 2][i] for i in g) for g in groups) == [7, 7]


def test_workers_store_what_one_process_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = write_job(tmp_path / "job", SynthSpec(ranks=3, steps=3, ops_per_step=40))
    gz = tmp_path / "job" / "rank3.pt.trace.json.gz"  # a compressed rank beside plain ones
    write_rank(gz, SynthSpec(ranks=4, steps=2, ops_per_step=20, seed=3), 3)
    seen: list[int] = []
    with Store(tmp_path / "pool") as store:
        report = store.import_traces([tmp_path / "job"], "j", progress=seen.append)
        pooled = _stored(store, "j")
    assert sum(seen) == sum(f.stat().st_size for f in [*files, gz])  # every worker's bytes
    assert [f.rank for f in report.files] == [0, 1, 2, 3]
    monkeypatch.setattr(_rankpool, "processes_for", lambda files, json_bytes=None: 0)
    with Store(tmp_path / "alone") as store:
        store.import_traces([tmp_path / "job"], "j")
        alone = _stored(store, "j")
    assert pooled == alone
    assert len(pooled[0]) == report.profile.events > 0


def test_a_bad_rank_file_fails_the_import_naming_it(tmp_path: Path) -> None:
    files = write_job(tmp_path / "job", SynthSpec(ranks=4, steps=2, ops_per_step=20))
    text = files[2].read_bytes()
    cut = text.index(b'"ts":', len(text) // 2)
    files[2].write_bytes(text[:cut] + b'"ts": "soon",' + text[cut + 5 :])  # a header that reads fine
    with Store(tmp_path / "home") as store, pytest.raises(TraceFormatError) as caught:
        store.import_traces([tmp_path / "job"], "j")
    assert str(files[2]) in str(caught.value)
    _nothing_stored(tmp_path / "home")


def _held_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (forked children) wait in ``stage`` until they are stopped: the test acts then."""
    parent, stage = os.getpid(), importer.Importer.stage

    def held(self: importer.Importer, *args: Any) -> Any:
        while os.getpid() != parent:
            time.sleep(0.05)
        return stage(self, *args)

    monkeypatch.setattr(importer.Importer, "stage", held)


def _when_workers_run(act: Any, count: int = 2) -> threading.Thread:
    """Call ``act(workers)`` on a thread once ``count`` new child processes of this one run."""
    before = {c.pid for c in psutil.Process().children()}

    def new() -> list[psutil.Process]:
        return [c for c in psutil.Process().children() if c.pid not in before]

    def run() -> None:
        deadline = time.monotonic() + 120
        while len(new()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        act(new())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _no_new_children(before: set[int]) -> None:
    left = [
        c for c in psutil.Process().children() if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE
    ]
    assert left == []  # every worker stopped and waited for


def test_ctrl_c_stops_every_worker_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_job(tmp_path / "job", SynthSpec(ranks=2, steps=2, ops_per_step=20))
    _held_workers(monkeypatch)
    before = {c.pid for c in psutil.Process().children()}
    # a shell's background job starts with SIGINT ignored (a CI runner may start the suite so): the
    # test sets Python's own Ctrl-C handler, or the signal would be lost and the import wait forever
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        thread = _when_workers_run(lambda _: os.kill(os.getpid(), signal.SIGINT))
        with Store(tmp_path / "home") as store, pytest.raises(KeyboardInterrupt):
            store.import_traces([tmp_path / "job"], "j")
        thread.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    _no_new_children(before)
    _nothing_stored(tmp_path / "home")


def test_a_killed_worker_fails_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = write_job(tmp_path / "job", SynthSpec(ranks=2, steps=2, ops_per_step=20))
    _held_workers(monkeypatch)
    before = {c.pid for c in psutil.Process().children()}
    thread = _when_workers_run(lambda found: found[0].send_signal(signal.SIGKILL))
    with (
        Store(tmp_path / "home") as store,
        pytest.raises(StoreError, match="ended without a result") as caught,
    ):
        store.import_traces([tmp_path / "job"], "j")
    thread.join()
    assert any(str(f) in str(caught.value) for f in files)
    _no_new_children(before)
    _nothing_stored(tmp_path / "home")


def test_what_runs_beside_starts_after_the_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``beside`` (the dashboard ``hyperscope import`` computes) starts its thread only once the
    workers are forked: a thread alive at the fork would keep the import from forking at all
    (``single_threaded``). The workers' parts, read back into memory, are handed to it whole."""
    asked: list[bool] = []
    decide = _rankpool.processes_for

    def processes_for(files: int, json_bytes: int | None = None) -> int:
        asked.append(any(t.name == "hyperscope-beside" for t in threading.enumerate()))
        return decide(files, json_bytes)

    monkeypatch.setattr(_rankpool, "processes_for", processes_for)
    given: list[object] = []
    paths = write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=3))
    with Store(tmp_path / "home") as store:
        report = store.import_traces(paths, "j", beside=lambda rows, where: given.append(rows()))
    assert asked == [False]
    assert [getattr(t, "num_rows", None) for t in given] == [report.profile.events]
