"""What to capture, and for how long: one validated object, also readable from the environment.

The launcher (``hyperscope profile``) passes its options to the training processes through
``HYPERSCOPE_*`` variables, so that ``torchrun`` and ``srun`` carry them to every rank unchanged.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from hyperscope.errors import UsageError

ENV_PREFIX: Final = "HYPERSCOPE_"
#: Set by ``hyperscope profile`` for its command: "1" starts the capture, "0" (its children) not.
ENV_AUTOSTART: Final = "HYPERSCOPE_AUTOSTART"


def _fail(name: str, value: object, expected: str) -> UsageError:
    return UsageError(f"ProfilerConfig.{name} is {value!r}; expected {expected}")


@dataclass(frozen=True)
class ProfilerConfig:
    """Settings of one capture. Every field has a default that suits a first run.

    ``steps`` and ``duration_s`` say when to record: only the steps listed (counted by
    ``hyperscope.step()`` from 0, or by the optimizer under the launcher), and for at most
    ``duration_s`` seconds from the start, like SageMaker's ``cpu_profiling_duration``. Both
    ``None`` record everything until ``stop_profiling()``.
    """

    job: str | None = None
    steps: range | Sequence[int] | None = None
    duration_s: float | None = None
    #: GPU kernels, memcpy/memset, syncs and the runtime calls that launched them (when CUDA is used)
    device: bool = True
    #: every PyTorch operator on the CPU (costs about 0.5 µs per operator)
    cpu_ops: bool = False
    #: Python call stacks of the operators (expensive; implies cpu_ops)
    python_stacks: bool = False
    #: tensor allocations and frees (implies cpu_ops)
    memory: bool = False
    #: input shapes of the operators (implies cpu_ops)
    record_shapes: bool = False
    #: seconds between system samples (CPU, memory, GPU, perf counters); 0 turns them off
    sample_interval_s: float = 0.5
    perf_counters: bool = True
    #: store directory; default $HYPERSCOPE_HOME, else ~/.hyperscope
    home: Path | str | None = None
    #: a new file every this many recorded steps (no sooner than ``flush_min_gap_s``) or seconds
    flush_every_steps: int = 10
    flush_every_s: float = 30.0
    #: a file has fixed costs (~10 ms of the writer's CPU: a 50-column Parquet footer, the rank's
    #: metadata, the catalog): one a second was 1 % of a core beside 3 ms steps
    flush_min_gap_s: float = 5.0
    #: events kept in memory between files: PyTorch's (estimated from the rate of the last file)
    #: bring the next file forward; annotations beyond it are dropped and counted
    max_buffered_events: int = 100_000
    #: extra facts to keep with the profile (model, dataset, git commit, ...)
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.job is not None and (not isinstance(self.job, str) or not self.job.strip()):
            raise _fail("job", self.job, "a non-empty name")
        if self.steps is not None:
            steps = self.steps
            if isinstance(steps, (str, bytes)) or not isinstance(steps, (range, Sequence)):
                raise _fail("steps", steps, "a range or a list of step numbers, such as range(10, 40)")
            for s in steps:
                if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                    raise _fail("steps", steps, f"step numbers >= 0 (found {s!r})")
            if len(steps) == 0:
                raise _fail("steps", steps, "at least one step")
        _positive(self.duration_s, "duration_s", allow_none=True)
        for name in ("device", "cpu_ops", "python_stacks", "memory", "record_shapes", "perf_counters"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise _fail(name, value, "True or False")
        if not _number(self.sample_interval_s) or not 0 <= self.sample_interval_s <= 3600:
            raise _fail("sample_interval_s", self.sample_interval_s, "seconds between 0 (off) and 3600")
        if 0 < self.sample_interval_s < 0.01:
            raise _fail("sample_interval_s", self.sample_interval_s, "at least 0.01 s, or 0 for no samples")
        if not isinstance(self.flush_every_steps, int) or self.flush_every_steps < 1:
            raise _fail("flush_every_steps", self.flush_every_steps, "an integer >= 1")
        _positive(self.flush_every_s, "flush_every_s", allow_none=False)
        if not _number(self.flush_min_gap_s) or self.flush_min_gap_s < 0:
            raise _fail("flush_min_gap_s", self.flush_min_gap_s, "a number of seconds >= 0")
        if not isinstance(self.max_buffered_events, int) or self.max_buffered_events < 1000:
            raise _fail("max_buffered_events", self.max_buffered_events, "an integer >= 1000")
        if self.home is not None and not isinstance(self.home, (str, Path)):
            raise _fail("home", self.home, "a directory path")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(self.tags).items()):
            raise _fail("tags", self.tags, "a mapping of strings to strings")

    @property
    def records_cpu_ops(self) -> bool:
        return self.cpu_ops or self.python_stacks or self.memory or self.record_shapes

    def wants_step(self, step: int) -> bool:
        return self.steps is None or step in self.steps

    @property
    def last_step(self) -> int | None:
        """The last step to record: the capture ends after it (None: runs until stopped)."""
        return None if self.steps is None else max(self.steps)

    def job_name(self, run_tag: str | None = None) -> str:
        """The job name, or one made from the script's name and the run (else the start time)."""
        if self.job:
            return self.job
        script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "python"
        return f"{script}-{run_tag or time.strftime('%Y%m%d-%H%M%S')}"

    def settings(self) -> dict[str, Any]:
        """What the profile's metadata keeps of this configuration (JSON-friendly)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "steps" and value is not None:
                value = _steps_text(value)
            elif isinstance(value, Path):
                value = str(value)
            elif f.name == "tags":
                value = dict(value)
            out[f.name] = value
        return out

    # -- environment ----------------------------------------------------------------------------

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` rebuild this configuration in another process."""
        env: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "tags" and not value):
                continue
            key = ENV_PREFIX + f.name.upper()
            if f.name == "steps":
                env[key] = _steps_text(value)
            elif f.name == "tags":
                env[key] = ",".join(f"{k}={v}" for k, v in dict(value).items())
            elif isinstance(value, bool):
                env[key] = "1" if value else "0"
            else:
                env[key] = str(value)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProfilerConfig:
        """A configuration from ``HYPERSCOPE_*`` variables; errors name the variable."""
        env = os.environ if environ is None else environ
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            key = ENV_PREFIX + f.name.upper()
            text = env.get(key)
            if text is None or text == "":
                continue
            try:
                kwargs[f.name] = _parse_env(f.name, text)
            except ValueError as exc:
                raise UsageError(f"${key} is {text!r}; expected {exc}") from None
        try:
            return cls(**kwargs)
        except UsageError as exc:
            raise UsageError(f"{exc} (from the HYPERSCOPE_* environment variables)") from None


_BOOL_TEXT: Final = {"1": True, "true": True, "yes": True, "on": True}
_BOOL_TEXT.update(dict.fromkeys(("0", "false", "no", "off"), False))
_INT_FIELDS: Final = ("flush_every_steps", "max_buffered_events")
_FLOAT_FIELDS: Final = ("duration_s", "sample_interval_s", "flush_every_s", "flush_min_gap_s")
_STR_FIELDS: Final = ("job", "home")


def _parse_env(name: str, text: str) -> object:
    if name == "steps":
        return parse_steps(text)
    if name == "tags":
        pairs = [p.split("=", 1) for p in text.split(",") if p]
        if not all(len(p) == 2 and p[0] for p in pairs):
            raise ValueError("key=value pairs separated by commas")
        return {k: v for k, v in pairs}
    if name in _INT_FIELDS:
        if not re.fullmatch(r"\d+", text):
            raise ValueError("a whole number")
        return int(text)
    if name in _FLOAT_FIELDS:
        try:
            return float(text)
        except ValueError:
            raise ValueError("a number of seconds") from None
    if name in _STR_FIELDS:
        return text
    value = _BOOL_TEXT.get(text.lower())
    if value is None:
        raise ValueError("1 or 0")
    return value


def parse_steps(text: str) -> range | list[int]:
    """``"10:40"`` (10 to 39, as Python slices), ``"10:"`` is refused, ``"3,5,8"``, or ``"7"``."""
    text = text.strip()
    match = re.fullmatch(r"(\d+):(\d+)", text)
    if match:
        start, stop = int(match[1]), int(match[2])
        if stop <= start:
            raise ValueError("START:STOP with STOP > START, such as 10:40")
        return range(start, stop)
    if re.fullmatch(r"\d+(,\d+)*", text):
        return sorted({int(s) for s in text.split(",")})
    raise ValueError("steps as START:STOP (10:40) or a list (3,5,8)")


def _steps_text(steps: range | Sequence[int]) -> str:
    if isinstance(steps, range) and steps.step == 1:
        return f"{steps.start}:{steps.stop}"
    return ",".join(str(s) for s in steps)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object, name: str, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not _number(value) or value <= 0:  # type: ignore[operator]
        raise _fail(name, value, "a number of seconds > 0" + (", or None" if allow_none else ""))
