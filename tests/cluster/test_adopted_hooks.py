"""``cluster hooks`` on an adopted cluster changes nothing of its state: the notes of the plugin's
build are said in what :func:`adopted_hooks.write` returns, never appended to the cluster's state
(not even for a moment: another save would keep them). The whole opt-in on real Slurm is in
``tests/recovery/test_existing_opt_ins.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperscope.cluster import adopted_hooks, hooks
from hyperscope.cluster.state import ClusterError, ClusterState
from hyperscope.recovery import spank


class _Untouchable(list[str]):
    """The cluster's notes as a list that fails the test on any change."""

    def append(self, item: str) -> None:
        raise AssertionError(f"a note was appended to the cluster's state: {item!r}")

    def __delitem__(self, key: object) -> None:
        raise AssertionError("a note was removed from the cluster's state")


def _adopted(tmp_path: Path, provider: str = "existing") -> ClusterState:
    d = tmp_path / "cl"
    d.mkdir()
    state = ClusterState(
        name="theirs", provider=provider, status="InService", dir=str(d), spec_path="", spec_digest="",
        slurm_conf="/etc/slurm/slurm.conf", shared_dir=str(tmp_path / "shared"),
        controller="ctl", partition="batch", ctld_port=6817, run_dir="/opt/hs/theirs", created=1700000000.0,
    )  # fmt: skip
    state.notes = _Untouchable(["an operator's note from adoption"])
    return state


def test_plugin_line_says_its_note_where_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spank, "HEADER", tmp_path / "missing.h")
    state = _adopted(tmp_path)
    mine: list[str] = []

    def line() -> str | None:
        log = str(tmp_path / "ar.log")
        return hooks.plugin_line(
            state, tmp_path, at=str(tmp_path), log=log, scontrol="scontrol", copy=True, notes=mine
        )

    assert line() is None
    assert len(mine) == 1 and "libslurm-dev" in mine[0]
    assert line() is None
    assert len(mine) == 1  # said once
    assert state.notes == ["an operator's note from adoption"]


def test_without_the_plugin_write_returns_the_note_and_keeps_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spank, "HEADER", tmp_path / "missing.h")
    state = _adopted(tmp_path)
    written = adopted_hooks.write(state)
    prolog = written.folder / hooks.TASK_PROLOG
    assert written.lines == [f"TaskProlog={prolog}"] and prolog.is_file()
    assert written.plugstack == "" and any("libslurm-dev" in n for n in written.notes)
    assert state.notes == ["an operator's note from adoption"]


@pytest.mark.skipif(not spank.HEADER.is_file(), reason="needs Slurm's spank.h (apt-get install libslurm-dev)")
def test_with_the_plugin_built_write_names_it_and_keeps_the_state(tmp_path: Path) -> None:
    state = _adopted(tmp_path)
    written = adopted_hooks.write(state)
    assert written.lines[-1] == f"PlugStackConfig={written.folder}/plugstack.conf"
    assert written.plugstack.startswith(f"required {written.folder}/hyperscope_auto_resume-")
    assert any("every node must match" in n for n in written.notes)
    assert state.notes == ["an operator's note from adoption"]


def test_hooks_is_refused_for_a_cluster_hyperscope_created(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="`hooks` is for adopted"):
        adopted_hooks.write(_adopted(tmp_path, provider="ssh"))
