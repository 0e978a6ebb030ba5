"""CPU performance counters of one process through ``perf_event_open``, without the ``perf`` tool.

Counters are opened per thread (not with ``inherit``) because an inherited counter only follows
threads created by a counted thread, and only adds their counts when they exit; listing
``/proc/PID/task`` at every read picks up threads created later, whoever created them. Each
counter is read on its own (no event groups): a group larger than the PMU's free counters is never
scheduled at all, while single events are multiplexed and scaled by time_enabled/time_running.

Everything here raises ``PerfUnavailable`` with a sentence a user can act on; the sampler turns it
into one note and carries on.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hyperscope.schema.events import SampleMetric

_SYSCALL_NR: Final[dict[str, int]] = {
    "x86_64": 298,
    "aarch64": 241,
    "arm64": 241,
    "riscv64": 241,
    "loongarch64": 241,
    "ppc64le": 319,
    "ppc64": 319,
    "s390x": 331,
}

_TYPE_HARDWARE, _TYPE_SOFTWARE, _TYPE_HW_CACHE = 0, 1, 3
_CACHE_ITLB, _CACHE_DTLB, _OP_READ, _RESULT_MISS = 4, 3, 0, 1
_READ_FORMAT = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING: value, enabled, running
_FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 5, 1 << 6
_FD_CLOEXEC: Final = 8  # PERF_FLAG_FD_CLOEXEC: forked DataLoader workers must not inherit counters
#: Ceiling on open descriptors, so a process with thousands of threads cannot exhaust ours.
MAX_FDS: Final = 2048


@dataclass(frozen=True, slots=True)
class PerfEvent:
    name: str  # as perf(1) spells it
    type: int
    config: int


def _cache(cache_id: int) -> int:
    return cache_id | (_OP_READ << 8) | (_RESULT_MISS << 16)


#: The hardware events the sampler records, each with the sample metric it fills.
HARDWARE_EVENTS: Final[dict[str, tuple[PerfEvent, SampleMetric]]] = {
    "cycles": (PerfEvent("cycles", _TYPE_HARDWARE, 0), SampleMetric.PERF_CYCLES),
    "ref-cycles": (PerfEvent("ref-cycles", _TYPE_HARDWARE, 9), SampleMetric.PERF_REF_CYCLES),
    "instructions": (PerfEvent("instructions", _TYPE_HARDWARE, 1), SampleMetric.PERF_INSTRUCTIONS),
    "cache-misses": (PerfEvent("cache-misses", _TYPE_HARDWARE, 3), SampleMetric.PERF_CACHE_MISSES),
    "branch-misses": (PerfEvent("branch-misses", _TYPE_HARDWARE, 5), SampleMetric.PERF_BRANCH_MISSES),
    "iTLB-load-misses": (
        PerfEvent("iTLB-load-misses", _TYPE_HW_CACHE, _cache(_CACHE_ITLB)),
        SampleMetric.PERF_ITLB_MISSES,
    ),
    "dTLB-load-misses": (
        PerfEvent("dTLB-load-misses", _TYPE_HW_CACHE, _cache(_CACHE_DTLB)),
        SampleMetric.PERF_DTLB_MISSES,
    ),
}
DEFAULT_PERF_EVENTS: Final[tuple[str, ...]] = tuple(HARDWARE_EVENTS)

#: Kernel-implemented events: no PMU needed, so they check this module where hardware counters
#: are absent (VMs). Not sample metrics.
SOFTWARE_EVENTS: Final[dict[str, PerfEvent]] = {
    "task-clock": PerfEvent("task-clock", _TYPE_SOFTWARE, 1),
    "context-switches": PerfEvent("context-switches", _TYPE_SOFTWARE, 3),
}


class PerfUnavailable(Exception):
    """The kernel or machine refuses counters; the message says which and why."""


class _Attr(ctypes.Structure):
    """``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER0, which every kernel since 2.6.31 accepts."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
    )


def paranoid_level() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def scaled_delta(prev: tuple[int, int, int], cur: tuple[int, int, int]) -> float | None:
    """Count over one interval, extrapolated when the counter ran for part of it (multiplexing).

    Scaling the differences, not the running totals, keeps one badly multiplexed interval from
    bleeding into the next. None when the counter never ran in the interval: its count is unknown,
    and zero would be a lie.
    """
    value, enabled, running = (c - p for c, p in zip(cur, prev, strict=True))
    if running <= 0:
        return None if enabled > 0 else 0.0
    if running >= enabled:
        return float(value)
    return value * (enabled / running)


def _explain(err: int, level: int | None) -> str:
    text = f"perf_event_open: {os.strerror(err)}"
    if err in (errno.EACCES, errno.EPERM):
        return text + (
            f" (kernel.perf_event_paranoid={level})" if level is not None else " (seccomp or no permission)"
        )
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
        return text + " (no hardware PMU for this event: a VM or an unsupported CPU)"
    if err == errno.ENOSYS:
        return text + " (syscall blocked or not built into the kernel)"
    return text


class PerfCounters:
    """Counters of ``events`` on every thread of ``pid``; ``read()`` gives counts since the last read."""

    def __init__(self, pid: int, events: Sequence[PerfEvent]) -> None:
        nr = _SYSCALL_NR.get(platform.machine())
        if nr is None:
            raise PerfUnavailable(f"perf_event_open: unknown syscall number on {platform.machine()}")
        self._nr = nr
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._pid = pid
        self._level = paranoid_level()
        #: Root or CAP_PERFMON may count the kernel; others only user space from paranoid level 2 up.
        self.user_only = False
        self.events: list[PerfEvent] = []
        self.problems: list[str] = []  # events dropped on the way, one line each
        self._fds: dict[int, dict[str, int]] = {}  # tid → event name → fd
        self._prev: dict[int, tuple[int, int, int]] = {}  # fd → last (value, enabled, running)
        self.fd_limited = False
        self._probe(events)

    def _open(self, event: PerfEvent, tid: int) -> int:
        attr = _Attr(type=event.type, size=ctypes.sizeof(_Attr), config=event.config)
        attr.read_format = _READ_FORMAT
        attr.flags = _FLAG_EXCLUDE_HV | (_FLAG_EXCLUDE_KERNEL if self.user_only else 0)
        fd = int(self._libc.syscall(self._nr, ctypes.byref(attr), tid, -1, -1, _FD_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def _probe(self, events: Sequence[PerfEvent]) -> None:
        """Find which events this kernel counts, and whether only in user space, on one thread."""
        tid = self._pid
        first_error: int | None = None
        for event in events:
            try:
                fd = self._open(event, tid)
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EPERM) and not self.user_only:
                    self.user_only = True  # paranoid ≥ 2 without privilege: user space only
                    try:
                        fd = self._open(event, tid)
                    except OSError as e2:
                        self.user_only = False
                        first_error = first_error or e2.errno
                        why = _explain(e2.errno or 0, self._level)
                        self.problems.append(f"perf event {event.name}: {why}")
                        continue
                else:
                    first_error = first_error or e.errno
                    self.problems.append(f"perf event {event.name}: {_explain(e.errno or 0, self._level)}")
                    continue
            os.close(fd)
            self.events.append(event)
        if not self.events:
            self.problems.clear()
            raise PerfUnavailable(_explain(first_error or 0, self._level))
        self.refresh()

    def threads(self) -> list[int]:
        try:
            return [int(t) for t in os.listdir(f"/proc/{self._pid}/task")]
        except FileNotFoundError:
            return []

    def refresh(self) -> None:
        """Open counters on threads that appeared since the last call (they count from now on)."""
        for tid in self.threads():
            if tid in self._fds:
                continue
            opened: dict[str, int] = {}
            for event in self.events:
                if sum(len(f) for f in self._fds.values()) + len(opened) >= MAX_FDS:
                    self.fd_limited = True
                    break
                try:
                    fd = self._open(event, tid)
                except OSError as e:
                    if e.errno == errno.ESRCH:  # the thread ended between listing and opening
                        break
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        self.fd_limited = True
                        break
                    for fd in opened.values():
                        self._prev.pop(fd, None)
                        os.close(fd)
                    raise PerfUnavailable(
                        f"{event.name} on thread {tid}: {_explain(e.errno or 0, self._level)}"
                    ) from e
                opened[event.name] = fd
                self._prev[fd] = (0, 0, 0)
            if opened:
                self._fds[tid] = opened

    def read(self) -> dict[str, float]:
        """Counts per event since the previous read, summed over threads, including ones that ended.

        A thread's counter keeps its final count after the thread exits, so it is read one last time
        and then closed.
        """
        alive = set(self.threads())
        totals: dict[str, float] = {}
        for tid in list(self._fds):
            for name, fd in self._fds[tid].items():
                try:
                    cur = struct.unpack("QQQ", os.read(fd, 24))
                except (OSError, struct.error):
                    continue
                delta = scaled_delta(self._prev[fd], cur)
                self._prev[fd] = cur
                if delta is not None:
                    totals[name] = totals.get(name, 0.0) + delta
            if tid not in alive:
                self._close_thread(tid)
        self.refresh()
        return totals

    def _close_thread(self, tid: int) -> None:
        for fd in self._fds.pop(tid, {}).values():
            self._prev.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def open_fds(self) -> int:
        return sum(len(f) for f in self._fds.values())

    def close(self) -> None:
        for tid in list(self._fds):
            self._close_thread(tid)
