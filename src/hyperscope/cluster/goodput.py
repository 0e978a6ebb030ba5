"""Goodput of one Slurm job: of the time since it first started, how much its ranks spent making
progress and how much was lost to failures and restarts — a pure function of the attempts the
catalog recorded (:mod:`hyperscope.store.attempts`) and, for an attempt still running, its newest
heartbeat.

An attempt trains from its start to its ranks' last heartbeat (``hs.step()`` beats at most once a
second, so this is exact to about a second); the rest of the job's span is lost: an attempt's
start-up (imports, the checkpoint's load) before its first beat is counted as training, but the
silence before a hang was noticed, the requeue, Slurm's hold and the wait for nodes are not. An
attempt whose start no sync saw (it failed within a second or two) trained nothing, and the span
begins at the first start that was seen (the unseen one's is not known). Steps
redone after resuming from an older checkpoint are counted as training: the heartbeats say when
ranks were busy, not which steps were kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hyperscope.store.attempts import Attempt


@dataclass(frozen=True, slots=True)
class Goodput:
    attempts: int  # attempts recorded (1 for a job that never restarted)
    restarts: int  # attempts ended by a requeue
    wall_s: float  # first start to the end (or now)
    training_s: float
    lost_s: float  # wall_s - training_s

    @property
    def ratio(self) -> float | None:
        """training / wall; None before the job has run at all."""
        return self.training_s / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "attempts": self.attempts,
            "restarts": self.restarts,
            "wall_s": round(self.wall_s, 3),
            "training_s": round(self.training_s, 3),
            "lost_s": round(self.lost_s, 3),
            "goodput": None if self.ratio is None else round(self.ratio, 4),
        }


def goodput(
    attempts: Sequence[Attempt],
    *,
    now_ns: int,
    newest_beat_ns: int | None = None,
    ended_ns: int | None = None,
) -> Goodput:
    """``newest_beat_ns``: the job's newest heartbeat now (for the attempt still running);
    ``ended_ns``: when the catalog last heard of a job that is no longer live (its open attempt
    ends there, not now)."""
    started = [a.start_ns for a in attempts if a.start_ns is not None]
    if not started:
        return Goodput(len(attempts), _restarts(attempts), 0.0, 0.0, 0.0)
    first = min(started)
    last_end = first
    training = 0
    for i, a in enumerate(attempts):
        current = i == len(attempts) - 1 and a.end_ns is None
        end = a.end_ns if a.end_ns is not None else (ended_ns if ended_ns is not None else now_ns)
        last_end = max(last_end, end)
        if a.start_ns is None:
            continue
        beat = a.last_beat_ns
        if current and newest_beat_ns is not None and (beat is None or newest_beat_ns > beat):
            beat = newest_beat_ns
        if beat is None or beat < a.start_ns:
            continue  # never beat in this attempt: none of it trained
        training += min(beat, end) - a.start_ns
    wall = max(0, last_end - first)
    training = min(training, wall)
    return Goodput(len(attempts), _restarts(attempts), wall / 1e9, training / 1e9, (wall - training) / 1e9)


def _restarts(attempts: Sequence[Attempt]) -> int:
    return sum(1 for a in attempts if a.end_state == "REQUEUED")
