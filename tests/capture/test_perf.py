"""perf_event_open through ctypes, against this machine's kernel.

Hardware counters need a PMU, which many VMs lack; the kernel's software events need none, so they
exercise the same syscall, per-thread bookkeeping and reads everywhere.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from hyperscope.capture import _perf
from hyperscope.capture._perf import (
    DEFAULT_PERF_EVENTS,
    HARDWARE_EVENTS,
    SOFTWARE_EVENTS,
    PerfCounters,
    PerfEvent,
    PerfUnavailable,
    scaled_delta,
)
from hyperscope.capture.sampler import SystemSampler
from hyperscope.schema.events import SampleMetric

TASK_CLOCK = SOFTWARE_EVENTS["task-clock"]  # nanoseconds on CPU


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds  # CPU time, so a loaded machine only makes it slower
    while time.thread_time() < end:
        pass


def hardware() -> PerfCounters:
    """Counters for every default hardware event, or skip saying why the kernel refused them."""
    try:
        return PerfCounters(os.getpid(), [HARDWARE_EVENTS[n][0] for n in DEFAULT_PERF_EVENTS])
    except PerfUnavailable as e:
        pytest.skip(f"hardware perf counters unavailable on this machine: {e}")


@pytest.fixture
def task_clock() -> Iterator[PerfCounters]:
    counters = PerfCounters(os.getpid(), [TASK_CLOCK])
    yield counters
    counters.close()


def test_scaling_of_multiplexed_counters() -> None:
    assert scaled_delta((100, 1000, 1000), (400, 2000, 2000)) == 300.0  # ran the whole interval
    assert scaled_delta((100, 1000, 1000), (400, 2000, 1250)) == 1200.0  # ran a quarter of it
    assert scaled_delta((100, 1000, 800), (100, 2000, 800)) is None  # never ran: unknown, not 0
    assert scaled_delta((0, 0, 0), (0, 0, 0)) == 0.0  # not even enabled yet


def test_software_counter_counts_busy_more_than_idle(task_clock: PerfCounters) -> None:
    task_clock.read()
    time.sleep(0.1)
    idle = task_clock.read()["task-clock"]
    spin(0.1)
    busy = task_clock.read()["task-clock"]
    assert busy >= 0.1e9 * 0.9  # task-clock is CPU time in ns: the spin's 0.1 s at least
    assert busy > 5 * idle


def test_threads_started_later_are_counted_until_they_end(task_clock: PerfCounters) -> None:
    task_clock.read()
    before = task_clock.open_fds
    started, go = threading.Event(), threading.Event()

    def worker() -> None:
        started.set()
        go.wait()
        spin(0.1)

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    task_clock.read()  # lists the new thread, opens its counter; it has not spun yet
    assert task_clock.open_fds == before + 1
    go.set()
    t.join()
    deadline = time.monotonic() + 10  # join() returns before the kernel has reaped the thread
    while str(t.native_id) in os.listdir("/proc/self/task"):
        assert time.monotonic() < deadline, "thread never left /proc/self/task"
        time.sleep(0.001)
    # the thread is gone, yet its final count is read, and its descriptor closed
    assert task_clock.read()["task-clock"] >= 0.1e9 * 0.9
    assert task_clock.open_fds == before


def test_descriptor_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_perf, "MAX_FDS", 1)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        counters = PerfCounters(os.getpid(), [TASK_CLOCK])
        assert counters.open_fds == 1 and counters.fd_limited
        counters.close()
    finally:
        stop.set()
        t.join()


def test_refusals_are_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(err: int) -> Callable[[PerfCounters, PerfEvent, int], int]:
        def _open(self: PerfCounters, event: PerfEvent, tid: int) -> int:
            raise OSError(err, os.strerror(err))

        return _open

    monkeypatch.setattr(_perf, "paranoid_level", lambda: 3)
    monkeypatch.setattr(PerfCounters, "_open", refuse(errno.EACCES))
    with pytest.raises(PerfUnavailable, match=r"Permission denied \(kernel.perf_event_paranoid=3\)"):
        PerfCounters(os.getpid(), [TASK_CLOCK])
    monkeypatch.setattr(PerfCounters, "_open", refuse(errno.ENOENT))
    with pytest.raises(PerfUnavailable, match="no hardware PMU"):
        PerfCounters(os.getpid(), [TASK_CLOCK])


def test_paranoid_kernel_falls_back_to_user_space(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = PerfCounters._open

    def kernel_refused(self: PerfCounters, event: PerfEvent, tid: int) -> int:
        if not self.user_only:
            raise OSError(errno.EACCES, "Permission denied")
        fd: int = real_open(self, event, tid)
        return fd

    monkeypatch.setattr(PerfCounters, "_open", kernel_refused)
    counters = PerfCounters(os.getpid(), [TASK_CLOCK])
    assert counters.user_only and counters.open_fds >= 1
    counters.close()


def test_sampler_gives_perf_rows_or_one_clear_note() -> None:
    tables: list[pa.Table] = []
    s = SystemSampler(interval_s=0.05, rank=0, node="n", sink=tables.append, gpus=False, per_core=False)
    s.start()
    spin(0.2)
    s.stop()
    perf_notes = [n for n in s.notes if n.startswith("perf")]
    if not s.sources["perf"]:
        assert len(perf_notes) == 1, s.notes
        assert perf_notes[0].startswith("perf counters unavailable: perf_event_open: ")
        assert any(why in perf_notes[0] for why in ("no hardware PMU", "perf_event_paranoid", "seccomp"))
        pytest.skip(f"no perf rows to check on this machine: {perf_notes[0]}")
    rows = [r for t in tables for r in t.to_pylist()]
    instructions = [r["value"] for r in rows if r["metric"] == SampleMetric.PERF_INSTRUCTIONS]
    assert instructions and sum(instructions) > 0
    assert {r["device"] for r in rows if str(r["metric"]).startswith("perf_")} == {-1}


def test_hardware_counters_busy_more_than_idle() -> None:
    counters = hardware()
    try:
        counters.read()
        time.sleep(0.1)
        idle = counters.read().get("instructions", 0.0)
        spin(0.1)
        busy = counters.read()
        assert busy["instructions"] > 0 and busy["cycles"] > 0
        assert busy["instructions"] > 5 * idle
    finally:
        counters.close()
