"""The system sampler on this machine's real /proc, NVML played by a fake seam, and failing sinks."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pyarrow as pa
import pytest

from hyperscope.capture._nvml import NvmlMissing, NvmlSeam, NvmlUnsupported
from hyperscope.capture.sampler import SystemSampler
from hyperscope.schema.events import SAMPLE_SCHEMA, SampleMetric

M = SampleMetric
LIVENESS_S = 10.0  # generous: only catches a hang, never measures speed


class Collect:
    """A sink that keeps every batch, as the writer would receive them."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []

    def __call__(self, table: pa.Table) -> None:
        self.tables.append(table)

    def rows(self) -> list[dict[str, Any]]:
        return pa.concat_tables(self.tables).to_pylist() if self.tables else []


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + LIVENESS_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def sampler(sink: Callable[[pa.Table], None], **kw: Any) -> SystemSampler:
    args: dict[str, Any] = {"interval_s": 0.05, "rank": 3, "node": "node-a", "gpus": False, "perf_events": ()}
    args.update(kw)
    return SystemSampler(sink=sink, **args)


@contextmanager
def burning() -> Iterator[list[float]]:
    """Burn CPU on a thread; the list gets the CPU seconds it used."""
    stop, used = threading.Event(), []

    def burn() -> None:
        while not stop.is_set():
            sum(range(1000))
        used.append(time.thread_time())

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    try:
        yield used
    finally:
        stop.set()
        t.join()


def values(rows: list[dict[str, Any]], metric: str) -> list[float]:
    return [float(r["value"]) for r in rows if r["metric"] == metric]


def test_host_and_process_samples_show_a_burning_thread() -> None:
    sink = Collect()
    s = sampler(sink)
    cpu_before = time.process_time()
    s.start()
    time.sleep(0.3)
    burn_from = time.time_ns()
    with burning() as burnt:
        time.sleep(0.6)
    burn_to = time.time_ns()
    time.sleep(0.2)  # a few rounds after the burn, so that rate rows cover all of it
    s.stop()
    cpu_used = time.process_time() - cpu_before

    assert s.notes == []
    assert s.sources == {"cpu": True, "memory": True, "process": True, "gpu": False, "perf": False}
    assert all(t.schema.equals(SAMPLE_SCHEMA) for t in sink.tables)
    rows = sink.rows()
    assert s.rows_written == len(rows)
    assert {r["rank"] for r in rows} == {3} and {r["node"] for r in rows} == {"node-a"}
    assert {r["metric"] for r in rows} <= set(SampleMetric)

    rounds = sorted({int(r["ts_ns"]) for r in rows})
    assert len(rounds) >= 8  # baseline + ~19 rounds + last; few, so a loaded machine still passes
    for metric in (M.CPU_UTIL_PCT, M.CPU_CORE_UTIL_PCT, M.PROCESS_CPU_UTIL_PCT):
        assert values(rows, metric), metric
    assert all(0.0 <= v <= 100.0 for v in values(rows, M.CPU_UTIL_PCT) + values(rows, M.CPU_CORE_UTIL_PCT))
    assert all(v >= 0.0 for v in values(rows, M.PROCESS_CPU_UTIL_PCT))
    assert all(v > 0 for v in values(rows, M.PROCESS_RSS_BYTES))
    total = values(rows, M.HOST_MEM_TOTAL_BYTES)[0]
    assert total == psutil.virtual_memory().total
    assert all(0 < v <= total for v in values(rows, M.HOST_MEM_USED_BYTES))

    # Rounds after the baseline give host CPU % with one row per core (devices 0..n-1); a round that
    # comes too soon after the previous one (stop(), a late wake-up) has no rate: it would be noise.
    rate_rounds = [int(r["ts_ns"]) for r in rows if r["metric"] == M.CPU_UTIL_PCT]
    assert rate_rounds[0] > rounds[0] and set(rate_rounds) <= set(rounds)
    assert len(rate_rounds) >= len(rounds) // 2
    cores = list(range(psutil.cpu_count() or 0))
    for ts in rate_rounds:
        per_core = [r for r in rows if r["ts_ns"] == ts and r["metric"] == M.CPU_CORE_UTIL_PCT]
        assert sorted(int(r["device"]) for r in per_core) == cores, ts
    assert {r["device"] for r in rows if r["metric"] != M.CPU_CORE_UTIL_PCT} == {-1}
    # each metric once per round: timestamps strictly increase along a series
    for metric in (M.CPU_UTIL_PCT, M.PROCESS_RSS_BYTES):
        series = [int(r["ts_ns"]) for r in rows if r["metric"] == metric]
        assert series == sorted(set(series))

    proc = [(int(r["ts_ns"]), float(r["value"])) for r in rows if r["metric"] == M.PROCESS_CPU_UTIL_PCT]
    assert proc[-1][0] > burn_to
    # CPU % times the span it covers, summed, is the CPU time between the first and last readings
    # (they telescope, up to a 10 ms tick at each end): it holds all the burning thread used, and
    # not more than the whole process used, whatever else the machine is doing.
    starts = [rounds[0]] + [ts for ts, _ in proc[:-1]]
    integral = sum(v / 100 * (ts - t0) / 1e9 for t0, (ts, v) in zip(starts, proc, strict=True))
    assert burnt[0] - 0.05 <= integral <= cpu_used + 0.05, (burnt, integral, cpu_used)
    idle = [v for ts, v in proc if ts <= burn_from]
    busy = [v for ts, v in proc if burn_from + 100_000_000 < ts <= burn_to]  # inside the burn
    assert idle and busy
    assert sum(busy) / len(busy) > sum(idle) / len(idle), (idle, busy)


def test_per_core_off_and_injected_clock_stamps_whole_rounds() -> None:
    ticks = iter(range(1_000, 10**9, 1_000))
    sink = Collect()
    s = sampler(sink, per_core=False, clock=lambda: next(ticks))
    s.start()
    wait_for(lambda: s.rows_written + s.buffered_rows >= 20, "a few rounds")
    s.stop()
    rows = sink.rows()
    assert not values(rows, M.CPU_CORE_UTIL_PCT)
    stamps = [int(r["ts_ns"]) for r in rows]
    assert stamps == sorted(stamps) and all(t % 1_000 == 0 for t in stamps)
    per_round = {t: stamps.count(t) for t in set(stamps)}
    assert per_round[1_000] == 3  # baseline: gauges only (memory used/total, RSS)
    assert all(n >= 3 for n in per_round.values())


class FakeNvml(NvmlSeam):
    """Two GPUs with fixed readings; optionally no power sensor, or an error from round ``fail_at`` on."""

    def __init__(self, *, fail_at: int | None = None, no_power: bool = False) -> None:
        super().__init__()
        self.fail_at, self.no_power = fail_at, no_power
        self.calls = 0
        self.shut = False

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        self.shut = True

    def device_count(self) -> int:
        return 2

    def utilization(self, index: int) -> tuple[float, float]:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeError("NVML: GPU is lost")
        return 70.0 + index, 30.0

    def memory(self, index: int) -> tuple[int, int]:
        return (1 + index) << 30, 80 << 30

    def power_w(self, index: int) -> float:
        if self.no_power:
            raise NvmlUnsupported("Not Supported")
        return 300.5

    def temperature_c(self, index: int) -> float:
        return 61.0

    def sm_clock_mhz(self, index: int) -> float:
        return 1980.0


def test_fake_gpus_give_one_row_per_metric_and_device() -> None:
    sink, seam = Collect(), FakeNvml(no_power=True)
    s = sampler(sink, gpus=True, nvml=seam)
    s.start()
    wait_for(lambda: s.rows_written + s.buffered_rows >= 40, "a few rounds")
    s.stop()
    rows = sink.rows()
    assert s.sources["gpu"] and seam.shut
    assert [n for n in s.notes if "power" in n] == [
        "GPU metric power unsupported on GPU 0, not sampled: Not Supported"
    ]
    first = {(r["device"], r["metric"]): r["value"] for r in rows if str(r["metric"]).startswith("gpu_")}
    for d in (0, 1):
        assert first[(d, M.GPU_UTIL_PCT)] == 70.0 + d
        assert first[(d, M.GPU_MEM_UTIL_PCT)] == 30.0
        assert first[(d, M.GPU_MEM_USED_BYTES)] == float((1 + d) << 30)
        assert first[(d, M.GPU_MEM_TOTAL_BYTES)] == float(80 << 30)
        assert first[(d, M.GPU_TEMP_C)] == 61.0 and first[(d, M.GPU_SM_CLOCK_MHZ)] == 1980.0
    assert not values(rows, M.GPU_POWER_W)  # dropped, the rest kept coming
    assert len(values(rows, M.GPU_UTIL_PCT)) >= 4


def test_nvml_error_mid_run_disables_gpu_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hyperscope.capture")
    sink, seam = Collect(), FakeNvml(fail_at=5)  # rounds 1-2 fine, dies on GPU 0 of round 3
    s = sampler(sink, gpus=True, nvml=seam, flush_rows=5)
    s.start()
    wait_for(lambda: any("gpu samples stopped" in n for n in s.notes), "the NVML error")
    failed_at = time.time_ns()
    wait_for(lambda: any(t > failed_at for t in (r["ts_ns"] for r in sink.rows())), "rows after the error")
    s.stop()
    rows = sink.rows()
    gpu_ts = {r["ts_ns"] for r in rows if str(r["metric"]).startswith("gpu_")}
    assert len(gpu_ts) == 2  # the two good rounds, nothing after
    after = [r for r in rows if int(r["ts_ns"]) > max(gpu_ts)]
    assert {M.CPU_UTIL_PCT, M.PROCESS_RSS_BYTES} <= {r["metric"] for r in after}
    assert s.notes == ["gpu samples stopped after an error: RuntimeError('NVML: GPU is lost')"]
    assert [r.getMessage() for r in caplog.records] == s.notes  # logged once, as a warning
    assert caplog.records[0].levelno == logging.WARNING
    assert seam.calls == 5 and seam.shut


def test_without_nvidia_gpu_the_note_says_so() -> None:
    class NoGpu(FakeNvml):
        def init(self) -> None:
            raise NvmlMissing("NVML not found")

    s = sampler(Collect(), gpus=True, nvml=NoGpu())
    s.start()
    s.stop()
    assert s.notes == ["no NVIDIA GPU: NVML not found"] and not s.sources["gpu"]


@pytest.mark.gpu
def test_real_nvml() -> None:
    seam = NvmlSeam()
    try:
        seam.init()
    except NvmlMissing as e:
        pytest.skip(f"no NVIDIA GPU here ({e}): the real NVML path needs one")
    count = seam.device_count()
    seam.shutdown()
    if count == 0:
        pytest.skip("NVML is installed but reports no GPU")
    sink = Collect()
    s = sampler(sink, gpus=True, interval_s=0.1)
    s.start()
    wait_for(lambda: s.rows_written + s.buffered_rows >= 20 * count, "GPU rows")
    s.stop()
    rows = sink.rows()
    assert s.sources["gpu"], s.notes
    assert {r["device"] for r in rows if r["metric"] == M.GPU_UTIL_PCT} == set(range(count))
    assert all(0 <= v <= 100 for v in values(rows, M.GPU_UTIL_PCT))
    assert all(v > 0 for v in values(rows, M.GPU_MEM_TOTAL_BYTES))


def test_sink_failure_is_noted_and_sampling_ends() -> None:
    calls: list[int] = []

    def full_disk(table: pa.Table) -> None:
        calls.append(table.num_rows)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")

    s = sampler(full_disk, flush_rows=10)
    s.start()
    wait_for(lambda: len(calls) >= 2, "the failing write")
    assert s._thread is not None
    s._thread.join(LIVENESS_S)  # the thread ends by itself: nowhere to put rows
    assert not s._thread.is_alive()
    s.stop()  # no exception, no further sink call
    assert calls == [10, 10] and s.rows_written == 10
    assert s.notes == ["system samples stopped: writing them failed: OSError(28, 'No space left on device')"]


def test_sink_failing_at_stop_does_not_escape() -> None:
    def broken(table: pa.Table) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    s = sampler(broken)  # flush_rows 4096: the only sink call is stop()'s
    s.start()
    s.stop()
    s.stop()  # idempotent
    assert s.rows_written == 0 and len(s.notes) == 1 and "No space left" in s.notes[0]


def test_memory_is_bounded_by_flush_rows() -> None:
    sink = Collect()
    s = sampler(sink, interval_s=0.01, flush_rows=7)
    seen: list[int] = []
    s.start()
    while s.rows_written < 300:
        seen.append(s.buffered_rows)
        time.sleep(0.002)
        assert len(seen) < LIVENESS_S / 0.002, "sampler made no progress"
    s.stop()
    assert max(seen) <= 7 and s.buffered_rows == 0
    sizes = [t.num_rows for t in sink.tables]
    assert all(n == 7 for n in sizes[:-1]) and 1 <= sizes[-1] <= 7
    assert sum(sizes) == s.rows_written


def test_dead_process_disables_its_source_only() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    sink = Collect()
    s = sampler(sink, pid=child.pid, flush_rows=5)
    s.start()
    child.wait(timeout=LIVENESS_S)
    wait_for(lambda: any(n.startswith("process samples stopped") for n in s.notes), "the exit")
    gone_at = time.time_ns()
    wait_for(lambda: any(int(r["ts_ns"]) > gone_at for r in sink.rows()), "rows after the exit")
    s.stop()
    assert "NoSuchProcess" in s.notes[0] and len(s.notes) == 1
    assert s.sources["process"] and values(sink.rows(), M.CPU_UTIL_PCT)


def test_bad_settings_are_noted_not_raised() -> None:
    s = sampler(Collect(), interval_s=0.0, flush_rows=0, perf_events=("cycles", "no-such-event"))
    assert s.notes == ["sampling interval 0.0 s is not usable; sampling every 1 s instead"]
    s.start()
    s.stop()  # returns at once: stop wakes the thread
    assert any("'no-such-event' unknown" in n for n in s.notes)
    assert s.rows_written > 0


def test_stop_returns_while_the_sink_hangs() -> None:
    entered, release = threading.Event(), threading.Event()
    late: list[int] = []

    def hung_disk(table: pa.Table) -> None:
        if entered.is_set():
            late.append(table.num_rows)
        entered.set()
        release.wait(LIVENESS_S)

    s = sampler(hung_disk, flush_rows=5)
    s.start()
    wait_for(entered.is_set, "the first write")
    done = threading.Event()
    threading.Thread(target=lambda: (s.stop(), done.set()), daemon=True).start()
    assert done.wait(LIVENESS_S), "stop() hung behind the sink"
    release.set()
    assert s._thread is not None
    s._thread.join(LIVENESS_S)
    assert not s._thread.is_alive() and late == []  # nothing reaches the sink after stop()
    assert "system sampler thread did not stop in time; last sample skipped" in s.notes
    s.start()  # no second life after stop()
    assert s._thread is not None and not s._thread.is_alive()
