"""The files through which ``hyperscope capture`` asks a running job to profile itself.

No port is opened on a compute node: the asker and every rank meet in a control directory they all
see (the cluster's shared directory, or the store on one machine). Each rank that calls
``hyperscope.step()`` keeps a presence file there; a request names one run, and each rank answers
in a file of its own. The agreement on where the capture starts is made by the asker alone, from
what the ranks answered (their step, when they were at it, how long their steps take): it names a
step that every rank reaches only after it has read the decision, so all start on the same step.

This module holds the formats and that arithmetic, pure; ``ondemand`` is the rank's side and
``remote`` the asker's.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from hyperscope.errors import UsageError

LIVE_DIR: Final = "live"
REQUESTS_DIR: Final = "requests"
#: a presence file older than this belongs to a process that stopped (or froze)
STALE_S: Final = 10.0
#: how often a rank looks for a request when none is pending, and while one is
IDLE_POLL_S: Final = 1.0
#: a request older than this is ignored (an asker killed before it could remove it)
REQUEST_TTL_S: Final = 600.0
BUSY_POLL_S: Final = 0.05

#: the answers a rank gives, in the order they come
ACK, STARTED, DONE = "ack", "started", "done"
BUSY, LATE, FAILED = "busy", "late", "failed"


def safe_key(run_id: str) -> str:
    """A run id as a file name (Slurm's ``slurm-12.0``, a host name with dots, ...)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:120] or "run"


@dataclass(frozen=True, slots=True)
class Presence:
    """One rank of a running job, as its presence file says (rewritten about once a second)."""

    key: str  # the run: every rank of one run has the same
    rank: int
    world_size: int
    node: str
    pid: int
    #: the names a user may give ``hyperscope capture`` for this job
    names: tuple[str, ...]
    step: int  # steps this rank has finished
    ts_ns: int  # when the file was written
    step_ns: int  # the mean step time over the last second (0: no step in it)
    home: str  # the store this rank's own profiles go to ("" when it has none of its own)
    job: str  # its catalog job (HYPERSCOPE_JOB), "" when none
    #: a capture of this process running now (the launcher's own, or an earlier request's)
    capturing: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Presence:
        d = json.loads(text)
        d["names"] = tuple(d["names"])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class Request:
    """What the asker wants of one run; ``phase`` "ask" first (ranks answer where they are), then
    "go" with the agreed ``start_step``."""

    id: str
    phase: str  # "ask" | "go"
    ranks: tuple[int, ...] | None  # None: every rank
    steps: int  # steps to record (0 while asking with a duration: decided at "go")
    cpu_ops: bool
    job: str
    home: str
    created_ns: int
    start_step: int = -1
    #: ranks not in lockstep (``plan_starts``): each rank's own start step, by rank (as text: JSON)
    starts: dict[str, int] | None = None

    def wants(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def start_for(self, rank: int) -> int:
        return self.starts.get(str(rank), self.start_step) if self.starts else self.start_step

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Request:
        d = json.loads(text)
        if d.get("ranks") is not None:
            d["ranks"] = tuple(int(r) for r in d["ranks"])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class Answer:
    """One rank's latest word on a request."""

    id: str
    rank: int
    phase: str  # ACK, STARTED, DONE, BUSY, LATE, FAILED
    step: int
    ts_ns: int
    step_ns: int = 0
    start_step: int = -1
    end_step: int = -1
    profile_id: str = ""
    message: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Answer:
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class Paths:
    """Where one control directory keeps what."""

    root: Path

    def live(self, key: str, rank: int) -> Path:
        return self.root / LIVE_DIR / f"{key}.{rank}.json"

    def request(self, key: str) -> Path:
        return self.root / REQUESTS_DIR / f"{key}.json"

    def answer(self, key: str, request_id: str, rank: int) -> Path:
        return self.root / REQUESTS_DIR / f"{key}.{request_id}.{rank}.answer"


def write_atomic(path: Path, text: str) -> None:
    """A reader on another node sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def parse_ranks(text: str) -> tuple[int, ...]:
    """``"0,3"``, ``"0-3"`` or a mix (``"0-1,6"``): the ranks, sorted, each once."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UsageError(f"--ranks is {text!r}; expected ranks such as 0,3 or 0-3")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo:
            raise UsageError(f"--ranks is {text!r}; a range goes up (0-3, not 3-0)")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def predicted_step(answer: Answer, at_ns: int) -> float:
    """Where a rank will be at ``at_ns``, from where it said it was and how fast it steps."""
    if answer.step_ns <= 0:
        return float(answer.step)  # no step in the last second: a slow step; it may end any time
    return answer.step + max(0, at_ns - answer.ts_ns) / answer.step_ns


def plan_start(answers: Sequence[Answer], now_ns: int, lead_s: float) -> int:
    """The step every answering rank reaches no sooner than ``lead_s`` from now: the first step
    after the furthest rank's predicted position then, and at least two steps past each rank's
    last word (a rank that steps faster than it said still reads the decision in time)."""
    if not answers:
        raise ValueError("no answers to plan from")
    at = now_ns + int(lead_s * 1e9)
    furthest = max(predicted_step(a, at) for a in answers)
    return max(math.floor(furthest) + 1, max(a.step for a in answers) + 2)


#: ranks further apart than this (beyond what their answers' times explain) do not step together
LOCKSTEP_SPREAD: Final = 3


def in_lockstep(answers: Sequence[Answer]) -> bool:
    """Whether the ranks step together: any two are at most ``LOCKSTEP_SPREAD`` steps apart, plus
    the steps the fastest of them makes between their two answers (they answer at different
    moments). Ranks that drifted apart over a run (independent replicas, a straggler that does
    not hold the others back) are far beyond that."""
    fastest = min((a.step_ns for a in answers if a.step_ns > 0), default=0)
    for a in answers:
        for b in answers:
            moved = abs(a.ts_ns - b.ts_ns) / fastest if fastest else 0.0
            if abs(a.step - b.step) > LOCKSTEP_SPREAD + moved:
                return False
    return True


def plan_starts(answers: Sequence[Answer], now_ns: int, lead_s: float) -> tuple[int, dict[int, int]]:
    """The common start step of ranks that step together (``in_lockstep``), and no per-rank ones;
    or, for ranks that do not, -1 and each rank's own start, so that they all start about
    ``lead_s`` from now instead of the fast ones waiting for the slow ones' step number."""
    if in_lockstep(answers):
        return plan_start(answers, now_ns, lead_s), {}
    return -1, {a.rank: plan_start([a], now_ns, lead_s) for a in answers}


def steps_for_duration(answers: Iterable[Answer], duration_s: float) -> int:
    """A capture of ``duration_s`` as a number of steps (so every rank stops on the same step):
    at the slowest rank's pace, at least one step."""
    slowest = max((a.step_ns for a in answers), default=0)
    if slowest <= 0:
        return 1
    return max(1, round(duration_s * 1e9 / slowest))


def read_presences(root: Path) -> list[Presence]:
    """Every rank's presence file in a control directory (unreadable ones skipped: being
    replaced this instant, or not ours)."""
    out = []
    live = root / LIVE_DIR
    for path in live.glob("*.json") if live.is_dir() else []:
        try:
            out.append(Presence.from_json(path.read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return out


def read_answer(path: Path) -> Answer | None:
    try:
        return Answer.from_json(path.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None
