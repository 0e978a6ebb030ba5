"""The existing provider: adopt a running Slurm by its slurm.conf (here: a local cluster started by
the test), use it, forget it, and leave its daemons running."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from hyperscope.cluster import manage
from hyperscope.cluster.local import LocalProvider
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec, SpecError, load_spec
from hyperscope.cluster.state import ClusterError, alive


def _existing_spec(tmp_path: Path, conf: str, **extra: object) -> Path:
    path = tmp_path / "adopt.yaml"
    doc = {"name": "adopted", "provider": "existing", "slurm_conf": conf, "shared_dir": "shared", **extra}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_existing_spec_validation(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    spec = load_spec(_existing_spec(tmp_path, str(conf)))
    assert (spec.provider, spec.groups, spec.lifecycle_dir, spec.slurm_conf) == ("existing", (), None, conf)
    with pytest.raises(SpecError, match=r"slurm_conf: no such file: .*nope\.conf \(got 'nope\.conf'\)"):
        load_spec(_existing_spec(tmp_path, "nope.conf"))
    with pytest.raises(SpecError, match="instance_groups: is not used by the existing provider"):
        load_spec(_existing_spec(tmp_path, str(conf), instance_groups=[]))
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "provider": "existing", "shared_dir": "s"}))
    with pytest.raises(SpecError, match="slurm_conf: is required by the existing provider"):
        load_spec(path)


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_adopt_use_and_forget(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    base = provider.create(make_spec(name="base", workers=2, spares=0))
    home = provider.home
    adopted = manage.create(_existing_spec(tmp_path, base.slurm_conf), home)
    assert (adopted.provider, adopted.status, adopted.partition) == ("existing", "InService", "dev")
    assert adopted.controller not in ("", "(unknown)")  # Slurm reports localhost as the host's name
    assert adopted.procs == [] and adopted.ctld_port == base.ctld_port
    rows = {r.node: (r.group, r.slurm_state, r.health) for r in manage.list_nodes("adopted", home)}
    assert rows == {f"workers-{i}": ("dev", "idle", "healthy") for i in (1, 2)}
    d = manage.describe("adopted", home)
    assert d.running and d.slurm_version.count(".") == 2
    out = str(tmp_path / "job.out")  # not slurm-N.out in the working directory
    assert manage.submit("adopted", home, ["--wait", "-o", out, "--wrap", "true"]).job_id > 0
    assert manage.create(_existing_spec(tmp_path, base.slurm_conf), home).status == "InService"  # again: fine

    with pytest.raises(ClusterError, match="exists with the existing provider"):
        provider.create(make_spec(name="adopted", workers=1, spares=0))
    assert manage.delete("adopted", home)
    assert all(alive(p) for p in base.procs)  # the adopted cluster's daemons are not ours to stop
    assert [s.name for s in manage.list_clusters(home)] == ["base"]


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_software_update_of_an_adopted_cluster_runs_the_operators_command_on_drained_nodes(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    base = provider.create(make_spec(name="own", workers=2, spares=0))
    home, record = provider.home, tmp_path / "updates.log"
    bare = _existing_spec(tmp_path, base.slurm_conf)
    manage.create(bare, home)
    say = lambda node, step: None  # noqa: E731
    with pytest.raises(ClusterError, match=r"recovery\.update_command: an adopted cluster's software"):
        manage.update_software("adopted", home, say, batch=1, drain_timeout_s=30)
    with pytest.raises(ClusterError, match=r"is adopted \(existing provider\): its nodes are its operator's"):
        manage.update(bare, home, say, drain_timeout_s=30)
    manage.delete("adopted", home)
    # the node as $1, while it is drained (no job of anyone's lands on it meanwhile)
    command = f'echo "$1 $(sinfo -h -n "$1" -o %T)" >> {record}'
    manage.create(_existing_spec(tmp_path, base.slurm_conf, recovery={"update_command": command}), home)
    done = manage.update_software("adopted", home, say, batch=1, drain_timeout_s=30)
    assert done == ["workers-1", "workers-2"]
    assert record.read_text().splitlines() == ["workers-1 drained", "workers-2 drained"]
    slurm = Slurm(Path(base.slurm_conf))
    deadline = time.monotonic() + 60  # idle* for a second or so after `state=resume`: Slurm's own
    while {(n.state, n.flags, n.reason) for n in slurm.nodes()} != {("IDLE", (), "")}:
        assert time.monotonic() < deadline, slurm.nodes()
        time.sleep(0.2)
    assert manage.load("adopted", home).status == "InService"
    assert all(alive(p) for p in base.procs)  # nothing of the operator's restarted
