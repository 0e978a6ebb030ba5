"""The two pieces of statistics and naming a comparison needs: whether a change in step time is
beyond noise, and which kernel names are "the same kernel" when only their tile sizes differ.

Beyond noise: a percentile bootstrap of the difference of medians (B − A). Each of
``BOOTSTRAP_RESAMPLES`` rounds resamples both sides' complete step times with replacement and
takes the difference of their medians; the change is beyond noise when the central
``CONFIDENCE`` interval of those differences excludes zero. The generator is seeded, so the same
two profiles always give the same interval. Fewer than ``MIN_STEPS`` steps on a side: not judged.

A resample's median is drawn without drawing the resample: resampling n sorted values is taking
``ceil(n·U)`` for n uniform U, so its k-th smallest value is the sorted data at ``ceil(n·U(k))``,
and the k-th smallest of n uniforms is Beta(k, n−k+1) distributed (the next one above it is
``U(k) + (1 − U(k))·Beta(1, n−k)``). Same distribution as resampling, O(1) per round: 285k steps
a side would otherwise take 2000 × 285k indices (4.5 GB).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

BOOTSTRAP_RESAMPLES: Final = 2000
CONFIDENCE: Final = 0.95
MIN_STEPS: Final = 3
SEED: Final = 20


@dataclass(frozen=True, slots=True)
class Interval:
    lo_ns: float
    hi_ns: float

    @property
    def excludes_zero(self) -> bool:
        return self.lo_ns > 0 or self.hi_ns < 0


def median_diff_interval(
    a: Sequence[int] | np.ndarray[Any, Any], b: Sequence[int] | np.ndarray[Any, Any]
) -> Interval | None:
    """The bootstrap interval of median(B) − median(A), or None with too few steps to judge."""
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        return None
    rng = np.random.default_rng(SEED)
    ma = _resampled_medians(np.sort(np.asarray(a, dtype=np.float64)), rng)
    mb = _resampled_medians(np.sort(np.asarray(b, dtype=np.float64)), rng)
    tail = (1 - CONFIDENCE) / 2
    lo, hi = np.quantile(mb - ma, [tail, 1 - tail])
    return Interval(float(lo), float(hi))


def _resampled_medians(
    x: np.ndarray[Any, np.dtype[np.float64]], rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """``BOOTSTRAP_RESAMPLES`` medians of resamples (with replacement) of the sorted ``x``."""
    n, m = len(x), BOOTSTRAP_RESAMPLES
    k = (n + 1) // 2
    u = rng.beta(k, n - k + 1, m)
    lower = x[np.clip(np.ceil(n * u).astype(np.int64), 1, n) - 1]
    if n % 2:
        return lower
    above = u + (1 - u) * rng.beta(1, n - k, m)
    return (lower + x[np.clip(np.ceil(n * above).astype(np.int64), 1, n) - 1]) / 2


#: Applied in order. What they strip is what differs between builds of "the same" kernel: C++
#: template arguments, the argument list, tile/cluster shapes (128x64, 64x64x32, _32x3), alignment.
_NORMALISE: Final = (
    (re.compile(r"^void\s+"), ""),
    (re.compile(r"\(.*\)\s*$"), ""),
    (re.compile(r"\d+(?:x\d+)+"), "#"),
    (re.compile(r"align\d+"), "align#"),
    (re.compile(r"\s+"), " "),
)


def _strip_templates(name: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<>")
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def normalise_kernel(name: str) -> str:
    """A kernel name without template arguments, argument list and tile sizes."""
    text = _strip_templates(name)
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return text.strip()
