"""The health-check wrapper and the slurm.conf lines that install it and the SPANK plugin."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.cluster import hooks
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import spank


def _state(tmp_path: Path) -> ClusterState:
    d = tmp_path / "cl"
    (d / "etc").mkdir(parents=True)
    return ClusterState(
        name="t1", provider="local", status="Creating", dir=str(d), spec_path="", spec_digest="",
        slurm_conf=str(d / "etc" / "slurm.conf"), shared_dir=str(tmp_path / "shared"),
        controller="controller-1", partition="dev", ctld_port=1, run_dir=str(tmp_path / "run"),
    )  # fmt: skip


def test_the_wrapper_gives_the_health_check_what_slurm_does_not(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec]
) -> None:
    state = _state(tmp_path)
    fake_python = tmp_path / "python"
    fake_python.write_text(
        '#!/bin/bash\necho "$@" > "$HYPERSCOPE_SHARED_DIR/args"; env > "$HYPERSCOPE_SHARED_DIR/env"\n'
    )
    fake_python.chmod(0o755)
    script = tmp_path / "hc.sh"
    script.write_text(hooks.healthcheck_wrapper(make_spec(), state, python=str(fake_python)))
    script.chmod(0o755)
    (tmp_path / "shared").mkdir()
    hooks.faults_dir(state).mkdir()
    (hooks.faults_dir(state) / "workers-2.json").write_text("{}")
    for node, faults in (("workers-1", None), ("workers-2", hooks.faults_dir(state) / "workers-2.json")):
        subprocess.run([str(script)], env={"SLURMD_NODENAME": node}, check=True)
        args = (tmp_path / "shared" / "args").read_text()
        env = (tmp_path / "shared" / "env").read_text()
        assert args.startswith(f"-m hyperscope health --drain --node {node} --path ")
        assert f"SLURM_CONF={state.slurm_conf}" in env
        assert (f"HYPERSCOPE_HEALTH_FAULTS={faults}" in env) == (faults is not None)
    # as the Prolog (Slurm sets SLURM_JOB_ID), only the quick checks
    subprocess.run([str(script)], env={"SLURMD_NODENAME": "workers-1", "SLURM_JOB_ID": "7"}, check=True)
    assert "--node workers-1 --quick --path " in (tmp_path / "shared" / "args").read_text()


def test_install_writes_the_slurm_conf_lines(tmp_path: Path, make_spec: Callable[..., ClusterSpec]) -> None:
    state = _state(tmp_path)
    lines = hooks.install(make_spec(), state)
    assert lines[:4] == [
        f"HealthCheckProgram={Path(state.dir) / 'etc' / 'healthcheck.sh'}",
        "HealthCheckInterval=5",
        "HealthCheckNodeState=ANY",
        f"Prolog={Path(state.dir) / 'etc' / 'healthcheck.sh'}",
    ]
    if spank.HEADER.is_file():
        assert lines[4] == f"PlugStackConfig={Path(state.dir) / 'etc' / 'plugstack.conf'}"
        assert state.notes == []


def test_no_plugin_is_a_note_not_a_failure(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spank, "HEADER", tmp_path / "missing.h")
    state = _state(tmp_path)
    lines = hooks.install(make_spec(), state)
    assert not any(line.startswith("PlugStackConfig") for line in lines)
    assert state.notes and "apt-get install libslurm-dev" in state.notes[0]
