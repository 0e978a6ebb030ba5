"""Stragglers at run time: a rank whose steps stay slower than the others' while the job trains.

The agent reads each running job's heartbeats about once a second; every rank's file holds its
mean step time since the write before. A rank whose mean is at least ``threshold_pct`` % over the
median of the other ranks' is slow in that window; once its slow windows add up to ``steps``
consecutive steps (a window at normal speed starts the count again) it is a straggler, and stays
one until a window at normal speed. The tracker holds only those counts, so the decision is a
pure function of the beats it is shown: the unit tests replay recorded step times.

What it can see, it sees from step times alone: ranks whose steps are not in lockstep (pipeline
stages, independent replicas, ranks that sync every few steps, or a rank so slow that the others'
timeouts show it). In lockstep data parallelism every rank waits in the gradient all-reduce for
the slowest one, so their step times are equal and this finds nothing; a capture of the job
(``hyperscope capture``) shows where each rank's time goes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from hyperscope.recovery.heartbeat import Beat


@dataclass(frozen=True, slots=True)
class StragglerPolicy:
    #: a rank this much slower than the median of the others is slow
    threshold_pct: float = 10.0
    #: ... and a straggler once it has been slow for this many consecutive steps
    steps: int = 20
    #: what the agent does about one: "notify" (log it, show it), "profile" (also capture the slow
    #: rank and a median one, ``hyperscope capture``), "replace" (also replace its node by a spare
    #: once the job has checkpointed since: ``decide.decide_straggler_replace``), "off" (do not look)
    action: str = "notify"
    #: steps each capture of the "profile" action records
    profile_steps: int = 10


@dataclass(frozen=True, slots=True)
class Straggler:
    job: str
    rank: int
    node: str
    step_ns: int  # its mean step time in the last window
    median_ns: int  # the median of the other ranks' in the same pass
    slow_steps: int  # consecutive slow steps so far
    #: the rank whose step time is the median's (the one to compare it with side by side)
    median_rank: int

    @property
    def over_pct(self) -> float:
        return 100.0 * (self.step_ns - self.median_ns) / self.median_ns

    def reason(self, policy: StragglerPolicy) -> str:
        where = f" on {self.node}" if self.node else ""
        return (
            f"rank {self.rank}{where} of job {self.job} is a straggler: its steps take "
            f"{self.step_ns / 1e6:.1f} ms, {self.over_pct:.0f}% over the median of the other ranks "
            f"({self.median_ns / 1e6:.1f} ms), for {self.slow_steps} consecutive steps "
            f"(threshold {policy.threshold_pct:g}% for {policy.steps} steps)"
        )


@dataclass
class _Count:
    step: int  # the step of the beat last counted
    slow: int = 0  # consecutive slow steps up to it
    fast: int = 0  # consecutive steps at speed, once named
    named: Straggler | None = None


@dataclass
class StragglerTracker:
    policy: StragglerPolicy = field(default_factory=StragglerPolicy)
    _counts: dict[tuple[str, int], _Count] = field(default_factory=dict)

    def observe(self, job: str, beats: Sequence[Beat]) -> list[Straggler]:
        """The stragglers of ``job`` after this pass's beats (one per rank, the latest). A rank
        named stays named until it has been at speed for ``steps`` consecutive steps, and while a
        pass has too few beats to compare: one fast window on a noisy machine is no recovery."""
        timed = [b for b in beats if b.step_ns > 0]
        factor = 1.0 + self.policy.threshold_pct / 100.0
        for b in timed if len(timed) >= 2 else ():
            others = [o for o in timed if o.rank != b.rank]
            median = statistics.median(o.step_ns for o in others)
            count = self._counts.get((job, b.rank))
            if count is None:
                self._counts[(job, b.rank)] = _Count(b.step)
                continue  # the window before this beat is not known to be this attempt's
            advanced = max(0, b.step - count.step)
            if not advanced:
                continue  # the same file as last pass
            count.step = b.step
            slow = b.step_ns >= factor * median
            if count.named is None:
                count.slow = count.slow + advanced if slow else 0
            else:
                count.fast = 0 if slow else count.fast + advanced
                if count.fast >= self.policy.steps:
                    count.named, count.slow, count.fast = None, 0, 0
                    continue
            if count.named is not None or count.slow >= self.policy.steps:
                near = min(others, key=lambda o: (abs(o.step_ns - median), o.rank))
                count.named = Straggler(job, b.rank, b.node, b.step_ns, int(median), count.slow, near.rank)
        return [c.named for (j, _), c in sorted(self._counts.items()) if j == job and c.named is not None]

    def forget(self, running: set[str]) -> None:
        """Jobs no longer running leave no counts behind."""
        for key in [k for k in self._counts if k[0] not in running]:
            del self._counts[key]
