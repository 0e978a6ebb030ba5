"""System samples (CPU, memory, GPU, performance counters) on one background thread.

The sampler is a guest in someone's training run, so its rules are about not getting in the way:
it never raises into the caller, a source that fails is switched off after one note, a sink that
fails (disk full) ends sampling instead of piling rows up in memory, and rows leave in batches of
``flush_rows`` so its memory is set by configuration, not by how long the run lasts. One round per
interval, driven by ``Event.wait``: nothing spins.

``sink`` is called from the sampler's thread (and from ``stop()``'s caller for the last batch),
never from two threads at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import psutil
import pyarrow as pa

from hyperscope.capture._nvml import GpuSource, NvmlMissing, NvmlSeam, Row
from hyperscope.capture._perf import (
    DEFAULT_PERF_EVENTS,
    HARDWARE_EVENTS,
    PerfCounters,
    PerfUnavailable,
    paranoid_level,
)
from hyperscope.schema.events import SAMPLE_SCHEMA, SampleMetric

__all__ = ["DEFAULT_PERF_EVENTS", "NvmlSeam", "SystemSampler"]

log = logging.getLogger("hyperscope.capture")

SOURCES = ("cpu", "memory", "process", "gpu", "perf")
#: The kernel counts CPU time in ticks (10 ms at USER_HZ=100): a rate over a shorter span is mostly
#: rounding (one tick in 2 ms reads as 500 %), so such a reading is skipped and the span grows.
MIN_RATE_SPAN_S = 0.02


class _Source(Protocol):
    name: str

    def sample(self, now: float) -> list[Row]:
        """``now``: ``time.monotonic()`` at the round's timestamp, the time base of every rate."""

    def close(self) -> None: ...


def _busy_pct(prev: Any, cur: Any) -> float | None:
    """Busy share of the CPU time between two ``psutil.cpu_times`` readings, as psutil computes it
    (guest time is already inside user time; iowait counts as idle); None when no time passed."""

    def split(t: Any) -> tuple[float, float]:
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        return total, t.idle + getattr(t, "iowait", 0.0)

    (t0, i0), (t1, i1) = split(prev), split(cur)
    if t1 - t0 <= 0:
        return None
    return min(100.0, max(0.0, 100.0 * ((t1 - t0) - (i1 - i0)) / (t1 - t0)))


class _HostCpu:
    """Host CPU % from ``cpu_times`` deltas kept here: ``psutil.cpu_percent`` keeps its last
    reading in module state, which the training script's own calls would disturb."""

    name = "cpu"

    def __init__(self, per_core: bool) -> None:
        self._per_core = per_core
        self._prev: Any = None
        self._prev_cores: list[Any] = []
        self._prev_at = 0.0

    def sample(self, now: float) -> list[Row]:
        if self._prev is not None and now - self._prev_at < MIN_RATE_SPAN_S:
            return []
        cur = psutil.cpu_times()
        cores = psutil.cpu_times(percpu=True) if self._per_core else []
        if self._prev is None or len(cores) != len(self._prev_cores):  # first, or a core came or went
            self._prev, self._prev_cores, self._prev_at = cur, cores, now
            return []
        host = _busy_pct(self._prev, cur)
        per_core = [_busy_pct(p, c) for p, c in zip(self._prev_cores, cores, strict=True)]
        if host is None or None in per_core:
            return []  # a core's clock has not ticked yet: all or nothing, the span grows until it has
        self._prev, self._prev_cores, self._prev_at = cur, cores, now
        rows: list[Row] = [(-1, SampleMetric.CPU_UTIL_PCT, host)]
        rows += [
            (i, SampleMetric.CPU_CORE_UTIL_PCT, pct) for i, pct in enumerate(per_core) if pct is not None
        ]
        return rows

    def close(self) -> None:
        pass


class _HostMemory:
    name = "memory"

    def sample(self, now: float) -> list[Row]:
        vm = psutil.virtual_memory()
        # total - available, as free(1) reports "used": psutil's own ``used`` leaves out
        # reclaimable memory differently across kernels
        return [
            (-1, SampleMetric.HOST_MEM_USED_BYTES, float(vm.total - vm.available)),
            (-1, SampleMetric.HOST_MEM_TOTAL_BYTES, float(vm.total)),
        ]

    def close(self) -> None:
        pass


class _Process:
    """CPU % (100 = one core) and RSS of the profiled process; its child processes are not counted."""

    name = "process"

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self._prev: tuple[float, float] | None = None

    def sample(self, now: float) -> list[Row]:
        with self._proc.oneshot():
            times = self._proc.cpu_times()
            rss = self._proc.memory_info().rss
        cpu = times.user + times.system
        rows: list[Row] = [(-1, SampleMetric.PROCESS_RSS_BYTES, float(rss))]
        if self._prev is None:
            self._prev = (now, cpu)
        elif now - self._prev[0] >= MIN_RATE_SPAN_S:
            rate = 100.0 * (cpu - self._prev[1]) / (now - self._prev[0])
            rows.append((-1, SampleMetric.PROCESS_CPU_UTIL_PCT, max(0.0, rate)))
            self._prev = (now, cpu)
        return rows

    def close(self) -> None:
        pass


class _Perf:
    """Hardware counters of the profiled process; the first read only sets the baseline, since the
    counts from opening to then cover no sampling interval."""

    name = "perf"

    def __init__(self, pid: int, names: Sequence[str]) -> None:
        self.notes: list[str] = []
        self._metric: dict[str, str] = {n: HARDWARE_EVENTS[n][1] for n in names}
        self._counters = PerfCounters(pid, [HARDWARE_EVENTS[n][0] for n in self._metric])
        self.notes += self._counters.problems
        if self._counters.user_only:
            self.notes.append(
                f"perf counters count user space only (kernel.perf_event_paranoid={paranoid_level()})"
            )
        self._primed = False
        self._limit_noted = False

    def sample(self, now: float) -> list[Row]:
        counts = self._counters.read()
        if self._counters.fd_limited and not self._limit_noted:
            self._limit_noted = True
            self.notes.append(
                f"perf counters: descriptor limit reached at {self._counters.open_fds} counters; "
                "threads created after that are not counted"
            )
        if not self._primed:
            self._primed = True
            return []
        return [(-1, self._metric[name], value) for name, value in counts.items()]

    def close(self) -> None:
        self._counters.close()


class SystemSampler:
    """Samples host, process, GPU and perf-counter metrics of one rank into ``SAMPLE_SCHEMA`` tables."""

    def __init__(
        self,
        *,
        interval_s: float,
        rank: int,
        node: str,
        pid: int | None = None,
        sink: Callable[[pa.Table], None],
        flush_rows: int = 4096,
        gpus: bool = True,
        perf_events: Sequence[str] = DEFAULT_PERF_EVENTS,
        per_core: bool = True,
        nvml: NvmlSeam | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._notes: list[str] = []
        self._notes_lock = threading.Lock()
        if not (isinstance(interval_s, int | float) and math.isfinite(interval_s) and interval_s >= 0.01):
            self._note(f"sampling interval {interval_s!r} s is not usable; sampling every 1 s instead")
            interval_s = 1.0
        self._interval = float(interval_s)
        self._rank, self._node = rank, node
        self._pid = os.getpid() if pid is None else pid
        self._sink, self._flush_rows = sink, max(1, int(flush_rows))
        self._gpus, self._perf_events, self._per_core = gpus, tuple(perf_events), per_core
        self._nvml, self._clock = nvml, clock
        self._active: list[_Source] = []
        self._sources = dict.fromkeys(SOURCES, False)
        self._lock = threading.Lock()  # guards the buffer and every sink call
        self._device: list[int] = []
        self._metric: list[str] = []
        self._ts: list[int] = []
        self._value: list[float] = []
        self._rows_written = 0
        self._sink_ok = True
        self._stop_evt = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._stopped = False

    # -- what the session reads -------------------------------------------------------------------

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    @property
    def sources(self) -> dict[str, bool]:
        return dict(self._sources)

    @property
    def rows_written(self) -> int:
        return self._rows_written

    @property
    def buffered_rows(self) -> int:
        """Rows held for the next batch; never more than ``flush_rows``."""
        return len(self._device)

    # -- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._started or self._stopped:  # once only: a thread started after stop() would never end
            return
        self._started = True
        try:
            self._open_sources()
            self._round()  # baseline of the rate sources, first values of the gauges
            self._thread = threading.Thread(target=self._run, name="hyperscope-sampler", daemon=True)
            self._thread.start()
        except Exception as e:  # a bug of ours, or no thread to be had: no samples, training goes on
            self._note(f"system sampler failed to start: {e!r}", logging.WARNING)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_evt.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=self._interval + 1.0)
        if thread is not None and thread.is_alive():
            self._note("system sampler thread did not stop in time; last sample skipped", logging.WARNING)
        else:
            try:
                if self._started and self._sink_ok:
                    self._round()
            except Exception as e:
                self._note(f"system sampler: last sample failed: {e!r}", logging.WARNING)
            for src in self._active:  # closing is best effort; the rows are already out
                with contextlib.suppress(Exception):
                    src.close()
        if self._lock.acquire(timeout=1.0):  # a sink stuck on a hung disk must not hang stop()
            try:
                self._flush_locked()
            finally:
                self._sink_ok = False  # the writer may close after stop(): no late batches
                self._lock.release()
        else:
            self._sink_ok = False
            self._note("system samples: the sink did not return; last batch dropped", logging.WARNING)

    # -- internals ---------------------------------------------------------------------------------

    def _note(self, line: str, level: int = logging.INFO) -> None:
        with self._notes_lock:
            if line in self._notes:
                return
            self._notes.append(line)
        log.log(level, "%s", line)

    def _open_sources(self) -> None:
        openers: list[tuple[str, Callable[[], _Source]]] = [
            ("cpu", lambda: _HostCpu(self._per_core)),
            ("memory", _HostMemory),
            ("process", lambda: _Process(self._pid)),
        ]
        if self._gpus:
            openers.append(("gpu", lambda: GpuSource(self._nvml if self._nvml is not None else NvmlSeam())))
        known = [n for n in self._perf_events if n in HARDWARE_EVENTS]
        for n in self._perf_events:
            if n not in HARDWARE_EVENTS:
                self._note(f"perf event {n!r} unknown (known: {', '.join(HARDWARE_EVENTS)})")
        if known:
            openers.append(("perf", lambda: _Perf(self._pid, known)))
        for name, open_source in openers:
            try:
                self._active.append(open_source())
            except NvmlMissing as e:
                self._note(f"no NVIDIA GPU: {e}")
            except PerfUnavailable as e:
                self._note(f"perf counters unavailable: {e}")
            except Exception as e:
                self._note(f"{name} samples unavailable: {e!r}", logging.WARNING)
        for src in self._active:
            self._drain_notes(src)

    def _drain_notes(self, src: _Source) -> None:
        pending: list[str] | None = getattr(src, "notes", None)
        while pending:
            self._note(pending.pop(0))

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + self._interval
            while not self._stop_evt.wait(max(0.0, deadline - time.monotonic())):
                self._round()
                if not self._active or not self._sink_ok:
                    return  # nothing left to sample or nowhere to put it: end the thread
                # behind schedule (a slow round, a suspended VM): skip ahead, never catch up in a burst
                deadline = max(deadline + self._interval, time.monotonic())
        except BaseException as e:
            self._note(f"system sampler stopped: {e!r}", logging.WARNING)

    def _round(self) -> None:
        # Rates are measured between round starts, the instants the timestamps name, so that a
        # rate times the span between two timestamps is what was used then, even when the thread
        # is preempted in the middle of a round.
        ts, now = self._clock(), time.monotonic()
        for src in list(self._active):
            try:
                rows = src.sample(now)
            except Exception as e:
                self._active.remove(src)
                self._note(f"{src.name} samples stopped after an error: {e!r}", logging.WARNING)
                with contextlib.suppress(Exception):
                    src.close()
                continue
            finally:
                self._drain_notes(src)
            if rows:
                self._sources[src.name] = True
                self._emit(ts, rows)

    def _emit(self, ts: int, rows: list[Row]) -> None:
        with self._lock:
            for device, metric, value in rows:
                if not self._sink_ok:
                    return
                self._device.append(device)
                self._metric.append(str(metric))
                self._ts.append(ts)
                self._value.append(value)
                if len(self._device) >= self._flush_rows:
                    self._flush_locked()

    def _flush_locked(self) -> None:
        n = len(self._device)
        if n == 0 or not self._sink_ok:
            self._device, self._metric, self._ts, self._value = [], [], [], []
            return
        table = pa.Table.from_arrays(
            [
                pa.repeat(pa.scalar(self._rank, pa.int32()), n),
                pa.repeat(pa.scalar(self._node, pa.string()), n),
                pa.array(self._device, pa.int32()),
                pa.array(self._metric, pa.string()),
                pa.array(self._ts, pa.int64()),
                pa.array(self._value, pa.float64()),
            ],
            schema=SAMPLE_SCHEMA,
        )
        self._device, self._metric, self._ts, self._value = [], [], [], []
        try:
            self._sink(table)
        except Exception as e:
            self._sink_ok = False
            self._stop_evt.set()
            self._note(f"system samples stopped: writing them failed: {e!r}", logging.WARNING)
        else:
            self._rows_written += n
