"""One exception tree. Messages name the file, the field and what was expected, so a user can act."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class HyperscopeError(Exception):
    """Base of every error hyperscope raises on purpose; the CLI prints it and exits non-zero."""


class TraceFormatError(HyperscopeError):
    """A trace file that is not what the importer expects."""

    def __init__(
        self,
        path: Path | str,
        problem: str,
        *,
        event_index: int | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.path = str(path)
        self.problem = problem
        self.event_index = event_index
        self.field = field
        self.expected = expected
        where = self.path
        if event_index is not None:
            where += f": traceEvents[{event_index}]"
        if field is not None:
            where += f": field '{field}'"
        message = f"{where}: {problem}"
        if expected is not None:
            message += f" (expected {expected})"
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        # pickled whole (an import's worker process sends its error to the parent)
        fields = {"event_index": self.event_index, "field": self.field, "expected": self.expected}
        return (_trace_format_error, (self.path, self.problem, fields))


def _trace_format_error(path: str, problem: str, fields: dict[str, Any]) -> TraceFormatError:
    return TraceFormatError(path, problem, **fields)


class StoreError(HyperscopeError):
    """The store cannot be read or written (disk full, permissions, corrupt metadata)."""


class JobNotFound(HyperscopeError):
    def __init__(self, job: str) -> None:
        super().__init__(f"no job named or numbered {job!r}; `hyperscope jobs` lists them")
        self.job = job


class UsageError(HyperscopeError):
    """Arguments that contradict each other or the store's state."""


class CheckpointError(HyperscopeError):
    """A checkpoint that cannot be written or read; the message names its directory and the file."""
