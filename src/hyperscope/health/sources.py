"""The hardware and system as the checks see it, behind seams a test (or an operator rehearsing a
failure) can override with a fault file: ``HYPERSCOPE_HEALTH_FAULTS=/path/faults.json``.

The fault file is JSON; every key is optional and replaces what the real source would say::

    {"gpus": [{"index": 0, "ecc_uncorrectable": 2}],   # merged into GPU 0's real (or empty) reading
     "gpu_count": 1,                                    # GPUs NVML reports
     "disk_free_bytes": {"/var/spool/slurmd": 0},       # per checked path
     "memory_available_pct": 1.0,
     "fail": {"shared": "mount vanished"}}              # any check, failed with this reason
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

FAULTS_ENV = "HYPERSCOPE_HEALTH_FAULTS"


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    name: str = ""
    ecc_uncorrectable: int = 0  # volatile, since the driver loaded
    retired_pages_pending: bool = False
    remapped_rows_pending: bool = False
    remap_failure: bool = False
    temperature_c: int | None = None
    slowdown_temperature_c: int | None = None
    throttle: list[str] = field(default_factory=list)  # hardware/thermal slowdowns active now
    xid_errors: list[int] = field(default_factory=list)


def load_faults() -> dict[str, Any]:
    path = os.environ.get(FAULTS_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} ({FAULTS_ENV}): cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} ({FAULTS_ENV}): expected a JSON object")
    return data


def read_gpus(faults: dict[str, Any], devices: Path | None = None) -> tuple[list[GpuReading] | None, str]:
    """Every GPU's reading, or ``None`` and why when NVML cannot be used (no GPU here). Without
    NVML, the GPU device files in ``devices`` (``nvidia0``...) are counted, so a missing GPU is
    still seen; their readings are then empty, and ``why`` says so."""
    readings, why = _nvml_readings()
    if readings is None and devices is not None:
        found = sorted(p for p in _glob(devices, "nvidia*") if p.name[6:].isdigit())
        if found:
            readings, why = [GpuReading(i) for i in range(len(found))], f"device files in {devices}; {why}"
    if "gpu_count" in faults:
        count = int(faults["gpu_count"])
        readings = (readings or [])[:count] + [GpuReading(i) for i in range(len(readings or []), count)]
        why = ""
    for fault in faults.get("gpus", []):
        if readings is None:
            readings = []
        index = int(fault["index"])
        while len(readings) <= index:
            readings.append(GpuReading(len(readings)))
        fields = {k: v for k, v in fault.items() if k != "index"}
        readings[index] = replace(readings[index], **fields)
    return readings, why


def _nvml_readings() -> tuple[list[GpuReading] | None, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML unavailable: {exc}"
    try:
        return [_reading(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())], ""
    finally:
        pynvml.nvmlShutdown()


def _reading(nvml: Any, index: int) -> GpuReading:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def ask(fn: Any, *args: Any, default: Any = None) -> Any:
        try:
            return fn(handle, *args)
        except (nvml.NVMLError, AttributeError):  # not on this board, or not in these bindings
            return default

    name = ask(nvml.nvmlDeviceGetName, default="")
    ecc = ask(
        nvml.nvmlDeviceGetTotalEccErrors,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nvml.NVML_VOLATILE_ECC,
        default=0,
    )
    pending = ask(nvml.nvmlDeviceGetRetiredPagesPendingStatus, default=0)
    remap = ask(nvml.nvmlDeviceGetRemappedRows, default=None)
    reasons = ask(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, default=0) or 0
    throttle = [
        label
        for bit, label in (
            (getattr(nvml, "nvmlClocksThrottleReasonHwSlowdown", 0x8), "hardware slowdown"),
            (getattr(nvml, "nvmlClocksThrottleReasonHwThermalSlowdown", 0x40), "thermal slowdown"),
            (getattr(nvml, "nvmlClocksThrottleReasonHwPowerBrakeSlowdown", 0x80), "power brake"),
        )
        if reasons & bit
    ]
    return GpuReading(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        ecc_uncorrectable=int(ecc or 0),
        retired_pages_pending=bool(pending),
        remapped_rows_pending=bool(remap and remap[2]),
        remap_failure=bool(remap and remap[3]),
        temperature_c=ask(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
        slowdown_temperature_c=ask(
            nvml.nvmlDeviceGetTemperatureThreshold, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        throttle=throttle,
    )


def _glob(folder: Path, pattern: str) -> list[Path]:
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []


def disk_free_bytes(path: Path, faults: dict[str, Any]) -> int:
    overrides = faults.get("disk_free_bytes", {})
    if str(path) in overrides:
        return int(overrides[str(path)])
    return shutil.disk_usage(path).free


def memory_available_pct(faults: dict[str, Any]) -> float:
    if "memory_available_pct" in faults:
        return float(faults["memory_available_pct"])
    vm = psutil.virtual_memory()
    return 100.0 * vm.available / vm.total
