"""When the agent may skip asking Slurm: only after a quiet pass, for at most CALM_POLL_S, and
never past a nudge (events file), a changed state file or a dead slurmd."""

from __future__ import annotations

import os
from pathlib import Path

from hyperscope.recovery import calm


def test_a_pass_is_quiet_only_with_every_job_finished_and_nothing_under_way() -> None:
    assert calm.quiet([], busy=False, watching=False, acted=False)
    assert calm.quiet(["COMPLETED", "CANCELLED", "FAILED"], busy=False, watching=False, acted=False)
    for state in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED", "SUSPENDED", "CONFIGURING"):
        assert not calm.quiet(["COMPLETED", state], busy=False, watching=False, acted=False)
    assert not calm.quiet([], busy=True, watching=False, acted=False)
    assert not calm.quiet([], busy=False, watching=True, acted=False)
    assert not calm.quiet([], busy=False, watching=False, acted=True)


def test_calm_holds_for_its_window_and_the_same_key_with_every_daemon_alive() -> None:
    c = calm.Calm()
    assert not c.holds(0.0, ("k",), lambda: True)  # never before a first pass
    c.after_pass(100.0, ("k",), True)
    assert c.holds(100.5, ("k",), lambda: True) and c.holds(
        100.0 + calm.CALM_POLL_S - 0.01, ("k",), lambda: True
    )
    assert not c.holds(100.0 + calm.CALM_POLL_S, ("k",), lambda: True)  # the window is over: ask Slurm
    assert not c.holds(100.5, ("k2",), lambda: True)  # the state file or the events file changed
    assert not c.holds(100.5, ("k",), lambda: False)  # a slurmd died
    c.after_pass(101.0, ("k",), False)  # a pass that was not quiet: ask again at the next one
    assert not c.holds(101.5, ("k",), lambda: True)


def test_a_nudge_changes_the_events_stamp_and_never_fails(tmp_path: Path) -> None:
    assert calm.events_stamp(tmp_path) is None
    calm.nudge(tmp_path)
    first = calm.events_stamp(tmp_path)
    assert first is not None
    (tmp_path / calm.EVENTS).touch()
    os.utime(tmp_path / calm.EVENTS, ns=(first - 10**9, first - 10**9))
    calm.nudge(tmp_path)
    assert calm.events_stamp(tmp_path) != first - 10**9
    calm.nudge(tmp_path / "gone" / "deeper")  # a deleted cluster: nothing, no error
    calm.nudge(None)
