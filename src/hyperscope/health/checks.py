"""The checks: each reads its source (through ``sources``) and answers pass / warn / fail with a
reason and a remedy. Thresholds follow what HyperPod's and NVIDIA's own health checks act on:
uncorrectable ECC errors or a failed row remap mean the GPU should be replaced; pending page
retirement or row remapping is fixed by a reboot (the driver applies them at load)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperscope.health import sources
from hyperscope.health.model import Action, CheckResult, Status

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class HealthConfig:
    expect_gpus: int | None = None  # None: whatever NVML finds (no GPU is fine)
    paths: tuple[Path, ...] = ()  # spool, tmp, checkpoint directories: free space and writable
    min_free_bytes: int = 1 * GIB
    shared: Path | None = None  # the cluster's shared directory: present and writable
    checks_dir: Path | None = None  # the user's own checks: executables
    user_check_timeout_s: float = 60.0
    min_memory_available_pct: float = 5.0
    dcgm: bool = True  # run `dcgmi diag -r 1` when dcgmi is installed
    #: at most one DCGM diagnostic per this many seconds (0: every run); in between, the last
    #: result (kept in ``dcgm_record``) is reported with its age
    dcgm_every_s: float = 0.0
    dcgm_record: Path | None = None
    #: the root, temporary and home file systems: free space, even when no ``paths`` are named
    system_disks: bool = True
    #: where GPU device files (``nvidiaN``) are counted when NVML cannot be asked
    gpu_devices: Path = Path("/dev")
    faults: dict[str, Any] = field(default_factory=dict)
    #: a path found writable is written to again only after this many seconds (0: every run).
    #: The periodic loop sets it: a probe is an fsync and an unlink, most of a healthy pass's CPU
    probe_every_s: float = 0.0


def gpu_checks(config: HealthConfig) -> list[CheckResult]:
    readings, why = sources.read_gpus(config.faults, config.gpu_devices)
    if readings is None:
        if config.expect_gpus:
            return [
                CheckResult("gpu", Status.FAIL, f"{config.expect_gpus} GPUs expected: {why}", Action.REPLACE)
            ]
        return [CheckResult("gpu", Status.PASS, f"no GPU to check ({why})")]
    out = []
    if config.expect_gpus is not None and len(readings) != config.expect_gpus:
        out.append(
            CheckResult(
                "gpu.count",
                Status.FAIL,
                f"{len(readings)} GPUs visible, {config.expect_gpus} expected",
                Action.REPLACE,
            )
        )
    for gpu in readings:
        out.extend(_one_gpu(gpu))
    if not out or all(r.status is Status.PASS for r in out):
        names = sorted({g.name for g in readings if g.name})
        healthy = f"{len(readings)} GPU(s) healthy {names if names else ''}".strip()
        out.append(CheckResult("gpu", Status.PASS, f"{healthy} ({why})" if why else healthy))
    return out


def _one_gpu(gpu: sources.GpuReading) -> list[CheckResult]:
    tag = f"gpu{gpu.index}"
    out = []
    if gpu.ecc_uncorrectable > 0:
        out.append(
            CheckResult(
                f"{tag}.ecc",
                Status.FAIL,
                f"{gpu.ecc_uncorrectable} uncorrectable ECC error(s)",
                Action.REPLACE,
            )
        )
    if gpu.remap_failure:
        out.append(CheckResult(f"{tag}.remap", Status.FAIL, "row remapping failed", Action.REPLACE))
    elif gpu.remapped_rows_pending or gpu.retired_pages_pending:
        out.append(
            CheckResult(
                f"{tag}.retire",
                Status.WARN,
                "memory rows/pages pending retirement: reboot to apply",
                Action.REBOOT,
            )
        )
    if gpu.xid_errors:
        fatal = [x for x in gpu.xid_errors if x in _FATAL_XIDS]
        out.append(
            CheckResult(
                f"{tag}.xid",
                Status.FAIL if fatal else Status.WARN,
                f"XID error(s) {sorted(set(gpu.xid_errors))}",
                Action.REPLACE if fatal else Action.REBOOT,
            )
        )
    if gpu.throttle:
        out.append(CheckResult(f"{tag}.throttle", Status.WARN, ", ".join(gpu.throttle)))
    if (
        gpu.temperature_c is not None
        and gpu.slowdown_temperature_c
        and (gpu.temperature_c >= gpu.slowdown_temperature_c)
    ):
        out.append(
            CheckResult(
                f"{tag}.temperature",
                Status.WARN,
                f"{gpu.temperature_c} °C, slowdown at {gpu.slowdown_temperature_c} °C",
            )
        )
    return out


#: XIDs NVIDIA documents as needing the GPU (or node) taken out: double-bit ECC (48), fallen off
#: the bus (79), uncontained ECC (94, 95), row-remap failure (64), GSP errors (119, 120).
_FATAL_XIDS = frozenset({48, 64, 74, 79, 94, 95, 119, 120})


def disk_checks(config: HealthConfig) -> list[CheckResult]:
    out = []
    for path in config.paths:
        name = f"disk:{path}"
        if not path.is_dir():
            out.append(CheckResult(name, Status.FAIL, "missing (expected a directory)", Action.REPLACE))
            continue
        free = sources.disk_free_bytes(path, config.faults)
        if free < config.min_free_bytes:
            out.append(
                CheckResult(
                    name,
                    Status.FAIL,
                    f"{free / GIB:.2f} GiB free, at least {config.min_free_bytes / GIB:.2f} GiB needed",
                    Action.REPLACE,
                )
            )
            continue
        problem = _writable(path, config.probe_every_s)
        out.append(
            CheckResult(name, Status.FAIL, problem, Action.REBOOT)
            if problem
            else CheckResult(name, Status.PASS, f"{free / GIB:,.1f} GiB free, writable")
        )
    return out


def system_disk_checks(config: HealthConfig) -> list[CheckResult]:
    """The root, temporary and home file systems, each once (``disk:/``, ``disk:/tmp`` ... only
    when on a file system of its own): a full one breaks a node whatever its job's paths are.
    Free space only; writability is the named ``paths``' check (a read-only root is legitimate)."""
    if not config.system_disks:
        return []
    out = []
    seen = {_device(p) for p in config.paths}
    for path in (Path("/"), Path(tempfile.gettempdir()), Path.home()):
        dev = _device(path)
        if dev is None or dev in seen:
            continue
        seen.add(dev)
        free = sources.disk_free_bytes(path, config.faults)
        if free < config.min_free_bytes:
            need = config.min_free_bytes / GIB
            reason = f"{free / GIB:.2f} GiB free, at least {need:.2f} GiB needed"
            out.append(CheckResult(f"disk:{path}", Status.FAIL, reason, Action.REPLACE))
        else:
            out.append(CheckResult(f"disk:{path}", Status.PASS, f"{free / GIB:,.1f} GiB free"))
    return out


def _device(path: Path) -> int | None:
    try:
        return path.stat().st_dev
    except OSError:
        return None


#: path -> when it was last found writable (monotonic s), for ``probe_every_s``; this process's
_writable_at: dict[Path, float] = {}


def _writable(path: Path, every_s: float) -> str:
    """:func:`_write_probe`'s finding, or "" without writing while the last success of this
    process is under ``every_s`` old (a failure is never remembered: it is probed every time)."""
    now = time.monotonic()
    if every_s > 0 and now - _writable_at.get(path, -math.inf) < every_s:
        return ""
    problem = _write_probe(path)
    if problem:
        _writable_at.pop(path, None)
    else:
        _writable_at[path] = now
    return problem


def _write_probe(path: Path) -> str:
    probe = path / f".hyperscope-health-{uuid.uuid4().hex}"
    try:
        with probe.open("wb") as fh:
            fh.write(b"ok")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as exc:
        return f"not writable: {exc.strerror or exc}"
    return ""


def shared_check(config: HealthConfig) -> list[CheckResult]:
    if config.shared is None:
        return []
    if not config.shared.is_dir():
        return [
            CheckResult("shared", Status.FAIL, f"{config.shared} is not there (unmounted?)", Action.REBOOT)
        ]
    problem = _writable(config.shared, config.probe_every_s)
    if problem:
        return [CheckResult("shared", Status.FAIL, f"{config.shared}: {problem}", Action.REBOOT)]
    return [CheckResult("shared", Status.PASS, f"{config.shared} present and writable")]


def memory_check(config: HealthConfig) -> list[CheckResult]:
    pct = sources.memory_available_pct(config.faults)
    if pct < config.min_memory_available_pct:
        return [
            CheckResult(
                "memory",
                Status.WARN,
                f"{pct:.1f}% of memory available, under {config.min_memory_available_pct:.0f}%",
                Action.REBOOT,
            )
        ]
    return [CheckResult("memory", Status.PASS, f"{pct:.0f}% available")]


def dcgm_check(config: HealthConfig) -> list[CheckResult]:
    """``dcgmi diag -r 1`` (up to minutes) at most once per ``dcgm_every_s``: the periodic check
    runs every few seconds, so in between it reports the last diagnostic's result and age."""
    dcgmi = shutil.which("dcgmi")
    if not config.dcgm or dcgmi is None:
        return []
    record = config.dcgm_record or Path(tempfile.gettempdir()) / "hyperscope-dcgm-diag.json"
    if config.dcgm_every_s > 0:
        try:
            last = json.loads(record.read_text())
            age = time.time() - float(last["time"])
            if 0 <= age < config.dcgm_every_s:
                reason = f"{last['reason']} ({age:.0f} s ago; next in {config.dcgm_every_s - age:.0f} s)"
                return [CheckResult("dcgm", Status(last["status"]), reason, Action(last["action"]))]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # none yet, or unreadable: run it
    done = subprocess.run([dcgmi, "diag", "-r", "1"], capture_output=True, text=True, timeout=300)
    failed = [line.strip() for line in done.stdout.splitlines() if "Fail" in line]
    if done.returncode != 0 or failed:
        detail = failed[0] if failed else (done.stderr.strip() or f"exit {done.returncode}")[:160]
        result = CheckResult("dcgm", Status.FAIL, f"dcgmi diag -r 1: {detail}", Action.REPLACE)
    else:
        result = CheckResult("dcgm", Status.PASS, "dcgmi diag -r 1 passed")
    if config.dcgm_every_s > 0:
        with contextlib.suppress(OSError):  # unrecorded: the next run diagnoses again, never wrong
            record.write_text(json.dumps({"time": time.time(), **result.to_dict()}))
    return [result]


def user_checks(config: HealthConfig) -> list[CheckResult]:
    """Each executable in ``checks_dir``: exit 0 pass, 1 warn, other fail; its first output line is
    the reason; a last line ``action: reboot|replace`` picks the remedy."""
    if config.checks_dir is None or not config.checks_dir.is_dir():
        return []
    out = []
    for exe in sorted(_executables(config.checks_dir)):
        name = f"user:{exe.name}"
        try:
            done = subprocess.run(
                [str(exe)], capture_output=True, text=True, timeout=config.user_check_timeout_s
            )
        except subprocess.TimeoutExpired:
            out.append(
                CheckResult(
                    name, Status.FAIL, f"no answer in {config.user_check_timeout_s:g} s", Action.REBOOT
                )
            )
            continue
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        action = Action.NONE
        if lines and lines[-1].lower().startswith("action:"):
            action = Action(lines.pop().split(":", 1)[1].strip().lower())
        reason = lines[0] if lines else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0]
        status = Status.PASS if done.returncode == 0 else Status.WARN if done.returncode == 1 else Status.FAIL
        if status is Status.FAIL and action is Action.NONE:
            action = Action.REPLACE
        out.append(CheckResult(name, status, reason[:160], action))
    return out


def _executables(folder: Path) -> Iterable[Path]:
    return (p for p in folder.iterdir() if p.is_file() and os.access(p, os.X_OK))


def injected_failures(config: HealthConfig) -> list[CheckResult]:
    return [
        CheckResult(str(name), Status.FAIL, f"{reason} (injected)", Action.REPLACE)
        for name, reason in config.faults.get("fail", {}).items()
    ]
