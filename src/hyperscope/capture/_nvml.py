"""NVML behind a small seam, and the GPU sample source built on it.

The seam exists so tests can play a GPU (and its failures) on machines without one; the real class
is the only code here that touches ``pynvml``. It turns NVML's many error classes into the three
outcomes the sampler acts on differently: no NVIDIA GPU at all (``NvmlMissing``, one quiet note),
one metric this GPU does not report (``NvmlUnsupported``, that metric is dropped), anything else
(the GPU source is disabled).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hyperscope.schema.events import SampleMetric


class NvmlMissing(Exception):
    """No NVIDIA driver, library or device: not an error, the machine has no GPU to sample."""


class NvmlUnsupported(Exception):
    """This device does not report this metric (e.g. power on some boards)."""


class NvmlSeam:
    """pynvml, reduced to what the sampler reads. Subclass it to fake a GPU."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._events: Any = None  # the XID event set, once watch_xids() made it

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        nvml = self._nvml
        try:
            return fn(*args)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                raise NvmlUnsupported(str(e)) from e
            raise RuntimeError(f"NVML: {e}") from e

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # nvidia-ml-py is a dependency, but a broken install must not crash
            raise NvmlMissing("nvidia-ml-py is not installed") from e
        missing = {
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "NVML not found",
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
            pynvml.NVML_ERROR_NO_PERMISSION: "no permission to use NVML",
        }
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            reason = missing.get(getattr(e, "value", None))
            if reason is not None:
                raise NvmlMissing(reason) from e
            raise RuntimeError(f"NVML init: {e}") from e
        self._nvml = pynvml
        count = int(self._call(pynvml.nvmlDeviceGetCount))
        self._handles = [self._call(pynvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]

    def shutdown(self) -> None:
        if self._nvml is not None:
            events, self._events = self._events, None
            if events is not None:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlEventSetFree(events)
            self._nvml.nvmlShutdown()
            self._nvml = None

    def device_count(self) -> int:
        return len(self._handles)

    def utilization(self, index: int) -> tuple[float, float]:
        """(GPU busy %, memory busy %) over NVML's last sample period."""
        rates = self._call(self._nvml.nvmlDeviceGetUtilizationRates, self._handles[index])
        return float(rates.gpu), float(rates.memory)

    def memory(self, index: int) -> tuple[int, int]:
        """(used, total) bytes."""
        info = self._call(self._nvml.nvmlDeviceGetMemoryInfo, self._handles[index])
        return int(info.used), int(info.total)

    def power_w(self, index: int) -> float:
        return float(self._call(self._nvml.nvmlDeviceGetPowerUsage, self._handles[index])) / 1000.0

    def temperature_c(self, index: int) -> float:
        nvml, handle = self._nvml, self._handles[index]
        return float(self._call(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, index: int) -> float:
        nvml = self._nvml
        return float(self._call(nvml.nvmlDeviceGetClockInfo, self._handles[index], nvml.NVML_CLOCK_SM))

    def name(self, index: int) -> str:
        raw = self._call(self._nvml.nvmlDeviceGetName, self._handles[index])
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def ecc_uncorrected(self, index: int) -> int:
        """Uncorrectable ECC errors since the driver loaded (NVML's volatile count)."""
        nvml = self._nvml
        return int(
            self._call(
                nvml.nvmlDeviceGetTotalEccErrors,
                self._handles[index],
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
            )
        )

    def watch_xids(self) -> list[int]:
        """Ask NVML for every GPU's critical XID events from now on; the GPUs that accepted (a
        board or MIG mode that cannot report them is left out)."""
        nvml = self._nvml
        self._events = self._call(nvml.nvmlEventSetCreate)
        watched = []
        for i, handle in enumerate(self._handles):
            try:
                self._call(
                    nvml.nvmlDeviceRegisterEvents, handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
            except (NvmlUnsupported, RuntimeError):
                continue
            watched.append(i)
        return watched

    def poll_xids(self) -> list[tuple[int, int]]:
        """The XID events since the last poll, as (GPU index, XID), without waiting."""
        nvml, events = self._nvml, self._events
        if events is None:
            return []
        out: list[tuple[int, int]] = []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(events, 0)
            except nvml.NVMLError:  # NVML_ERROR_TIMEOUT: none left
                return out
            out.append((int(nvml.nvmlDeviceGetIndex(data.device)), int(data.eventData)))


Row = tuple[int, str, float]  # device, metric, value


class GpuSource:
    """Every GPU's utilization, memory, power, temperature and SM clock, read through a seam.

    Opening the seam raises (``NvmlMissing`` or another error) so the sampler can say why there are
    no GPU rows; after that, a metric a device does not support is dropped and reported through
    ``notes`` while the others keep coming.
    """

    name = "gpu"

    def __init__(self, seam: NvmlSeam) -> None:
        self._seam = seam
        try:
            seam.init()
            self._count = seam.device_count()
        except Exception:
            self.close()
            raise
        if self._count <= 0:
            self.close()
            raise NvmlMissing("NVML reports no devices")
        self._dropped: set[str] = set()
        self.notes: list[str] = []  # new lines since the sampler last looked

    def _read(self, group: str, read: Callable[[int], Any], index: int) -> Any:
        if group in self._dropped:
            return None
        try:
            return read(index)
        except NvmlUnsupported as e:
            self._dropped.add(group)
            self.notes.append(f"GPU metric {group} unsupported on GPU {index}, not sampled: {e}")
            return None

    def sample(self, now: float) -> list[Row]:
        rows: list[Row] = []
        seam = self._seam
        for i in range(self._count):
            util = self._read("utilization", seam.utilization, i)
            if util is not None:
                rows += [(i, SampleMetric.GPU_UTIL_PCT, util[0]), (i, SampleMetric.GPU_MEM_UTIL_PCT, util[1])]
            mem = self._read("memory", seam.memory, i)
            if mem is not None:
                rows += [
                    (i, SampleMetric.GPU_MEM_USED_BYTES, float(mem[0])),
                    (i, SampleMetric.GPU_MEM_TOTAL_BYTES, float(mem[1])),
                ]
            for group, read, metric in (
                ("power", seam.power_w, SampleMetric.GPU_POWER_W),
                ("temperature", seam.temperature_c, SampleMetric.GPU_TEMP_C),
                ("sm_clock", seam.sm_clock_mhz, SampleMetric.GPU_SM_CLOCK_MHZ),
            ):
                value = self._read(group, read, i)
                if value is not None:
                    rows.append((i, metric, float(value)))
        return rows

    def close(self) -> None:
        # shutting down a broken NVML must not turn into a second error
        with contextlib.suppress(Exception):
            self._seam.shutdown()
