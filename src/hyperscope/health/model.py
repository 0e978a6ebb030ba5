"""What a health check answers: pass, warn or fail, why, and what an operator (or the agent) should
do about it. Kept as plain data so the CLI, Slurm's drain reason and the agent read the same thing."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


class Action(enum.StrEnum):
    """The remedy a check suggests, in increasing severity."""

    NONE = "none"
    REBOOT = "reboot"
    REPLACE = "replace"


_SEVERITY = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}
_ACTION_ORDER = {Action.NONE: 0, Action.REBOOT: 1, Action.REPLACE: 2}


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str  # "gpu", "gpu.ecc", "disk:/var/spool", "user:ib-links", ...
    status: Status
    reason: str
    action: Action = Action.NONE

    def to_dict(self) -> dict[str, str]:
        return {
            "check": self.check,
            "status": self.status.value,
            "reason": self.reason,
            "action": self.action.value,
        }


@dataclass(frozen=True, slots=True)
class HealthReport:
    node: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return max((r.status for r in self.results), key=_SEVERITY.__getitem__, default=Status.PASS)

    @property
    def action(self) -> Action:
        return max(
            (r.action for r in self.results if r.status is not Status.PASS),
            key=_ACTION_ORDER.__getitem__,
            default=Action.NONE,
        )

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is Status.FAIL]

    def drain_reason(self) -> str:
        """Slurm's drain reason for the first failure: ``hyperscope: <check>: <detail>``."""
        first = self.failures[0] if self.failures else None
        if first is None:
            return ""
        return f"hyperscope: {first.check}: {first.reason}"[:200]  # Slurm keeps reasons short

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status.value,
            "action": self.action.value,
            "results": [r.to_dict() for r in self.results],
        }
