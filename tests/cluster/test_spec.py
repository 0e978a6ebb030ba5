"""The spec: defaults, relative paths, and error messages that name the file, the key and the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster.spec import SlurmSettings, SpecError, load_spec, parse_spec
from hyperscope.errors import UsageError

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster_specs"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def test_valid_spec_resolves_paths_and_defaults() -> None:
    spec = load_spec(DATA / "valid.yaml")
    assert spec.name == "tiny" and spec.provider == "local"
    assert spec.lifecycle_dir == DATA / "lifecycle" and spec.on_create.is_file()
    assert spec.shared_dir == DATA / "shared"
    assert spec.slurm == SlurmSettings(partition="train")
    workers = spec.groups_with("worker")[0]
    assert workers.node_names() == ["workers-1", "workers-2", "workers-3"]
    assert [workers.is_spare(n) for n in workers.node_names()] == [False, False, True]
    assert [n for _, n in spec.slurm_nodes()] == ["workers-1", "workers-2", "workers-3"]
    assert [n for _, n in spec.all_nodes()][:2] == ["controller-1", "login-1"]


def test_shipped_example_is_valid() -> None:
    spec = load_spec(EXAMPLE)
    assert [(g.role, g.count, g.gpus_per_node, g.spares) for g in spec.groups] == [
        ("controller", 1, 0, 0),
        ("login", 1, 0, 0),
        ("worker", 4, 2, 1),
    ]


def test_unknown_role_names_file_key_and_value() -> None:
    with pytest.raises(SpecError) as info:
        load_spec(DATA / "bad_role.yaml")
    msg = str(info.value)
    assert str(DATA / "bad_role.yaml") in msg
    assert "instance_groups[1].role" in msg and "'gpu-worker'" in msg
    assert isinstance(info.value, UsageError)


def test_yaml_syntax_error_has_line() -> None:
    with pytest.raises(SpecError, match=r"bad_yaml\.yaml: line \d+, column \d+: not valid YAML"):
        load_spec(DATA / "bad_yaml.yaml")


def test_missing_file() -> None:
    with pytest.raises(SpecError, match=r"nope\.yaml: cannot read the spec"):
        load_spec(DATA / "nope.yaml")


def _valid() -> dict[str, Any]:
    data = yaml.safe_load((DATA / "valid.yaml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("edit", "key", "value"),
    [
        (lambda d: d["instance_groups"][2].update(count=0), "instance_groups[2].count", "0"),
        (lambda d: d["instance_groups"][2].update(count="4"), "instance_groups[2].count", "'4'"),
        (
            lambda d: d["instance_groups"][2].update(gpus_per_node=-1),
            "instance_groups[2].gpus_per_node",
            "-1",
        ),
        (lambda d: d["instance_groups"][1].update(spares=1), "instance_groups[1].spares", "1"),
        (lambda d: d["instance_groups"][0].update(count=2), "instance_groups[0].count", "2"),
        (lambda d: d["instance_groups"][1].update(name="Login_1"), "instance_groups[1].name", "'Login_1'"),
        (lambda d: d["instance_groups"][1].update(name="controller"), "instance_groups[1].name", None),
        (lambda d: d["instance_groups"][2].update(cpus=4), "instance_groups[2].cpus", None),
        (lambda d: d["instance_groups"][2].pop("count"), "instance_groups[2].count", None),
        (lambda d: d.update(provider="aws"), "provider", "'aws'"),
        (lambda d: d.update(name="My Cluster"), "name", "'My Cluster'"),
        (lambda d: d.update(instance_groups=[]), "instance_groups", "[]"),
        (lambda d: d["instance_groups"].pop(2), "instance_groups", None),
        (lambda d: d.pop("shared_dir"), "shared_dir", None),
        (lambda d: d.update(lifecycle_scripts="nowhere"), "lifecycle_scripts", "'nowhere'"),
        (lambda d: d.update(slurm={"cred_expire": 2}), "slurm.cred_expire", "2"),
        (lambda d: d.update(slurm={"port_base": 80}), "slurm.port_base", "80"),
        (lambda d: d.update(slurm={"timeout": 3}), "slurm.timeout", None),
        (lambda d: d.update(slurm={"backup_controller": "yes"}), "slurm.backup_controller", "'yes'"),
        (lambda d: d.update(extra=1), "extra", None),
        (lambda d: d.update(recovery={"health_check_interval": 0}), "recovery.health_check_interval", "0"),
        (lambda d: d.update(recovery={"agent": "yes"}), "recovery.agent", "'yes'"),
        (lambda d: d.update(recovery={"hang": 3}), "recovery.hang", None),
        (lambda d: d.update(recovery={"max_replacements": -1}), "recovery.max_replacements", "-1"),
        (lambda d: d.update(recovery={"dcgm_interval_s": 5}), "recovery.dcgm_interval_s", "5"),
        (
            lambda d: d.update(recovery={"health_checks_dir": "nowhere"}),
            "recovery.health_checks_dir",
            "'nowhere'",
        ),
        (
            lambda d: d.update(recovery={"reboot_command": ["ipmitool"]}),
            "recovery.reboot_command",
            "['ipmitool']",
        ),
    ],
)
def test_invalid_values_are_named(edit: Any, key: str, value: str | None) -> None:
    data = _valid()
    edit(data)
    with pytest.raises(SpecError) as info:
        parse_spec(data, DATA / "valid.yaml")
    msg = str(info.value)
    assert msg.startswith(f"{DATA / 'valid.yaml'}: {key}: "), msg
    if value is not None:
        assert f"(got {value})" in msg, msg


def test_top_level_must_be_mapping() -> None:
    with pytest.raises(SpecError, match=r"\(top level\): must be a mapping"):
        parse_spec(["x"], Path("c.yaml"))


def test_recovery_defaults_and_settings() -> None:
    data = _valid()
    assert parse_spec(data, DATA / "valid.yaml").recovery.health_check_interval == 5
    data["recovery"] = {"agent": False, "hang_timeout_s": 20, "max_attempts": 2}
    r = parse_spec(data, DATA / "valid.yaml").recovery
    assert (r.agent, r.hang_timeout_s, r.max_attempts, r.health_check_interval) == (False, 20, 2, 5)


def test_the_brake_the_checks_folder_and_dcgms_schedule(tmp_path: Path) -> None:
    data = _valid()
    r = parse_spec(data, DATA / "valid.yaml").recovery
    assert (r.max_replacements, r.replacement_window_s, r.health_checks_dir, r.dcgm_interval_s) == (
        4, 600, None, 3600,
    )  # fmt: skip
    (tmp_path / "checks").mkdir()
    (tmp_path / "lifecycle").mkdir()
    (tmp_path / "lifecycle" / "on_create.sh").write_text("true\n")
    data["lifecycle_scripts"] = "lifecycle"
    data["recovery"] = {"max_replacements": 2, "replacement_window_s": 60, "health_checks_dir": "checks"}
    r = parse_spec(data, tmp_path / "c.yaml").recovery
    assert (r.max_replacements, r.replacement_window_s, r.health_checks_dir) == (2, 60, tmp_path / "checks")


def test_recovery_commands_and_the_adopted_default(tmp_path: Path) -> None:
    data = _valid()
    data["recovery"] = {"reboot_command": " ipmitool -H $1-bmc power cycle ", "ticket_command": "mail ops"}
    r = parse_spec(data, DATA / "valid.yaml").recovery
    assert (r.reboot_command, r.replace_command, r.ticket_command) == (
        "ipmitool -H $1-bmc power cycle",
        "",
        "mail ops",
    )
    assert r.agent  # our own clusters: the agent by default
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    adopted = {"name": "a", "provider": "existing", "slurm_conf": str(conf), "shared_dir": "s"}
    assert not parse_spec(adopted, tmp_path / "a.yaml").recovery.agent  # someone else's: only if asked
    adopted["recovery"] = {"agent": True}
    assert parse_spec(adopted, tmp_path / "a.yaml").recovery.agent


def test_a_backup_controller_is_a_flag_locally_a_host_on_ssh_and_the_operators_on_existing(
    tmp_path: Path,
) -> None:
    data = _valid()
    assert not parse_spec(data, DATA / "valid.yaml").slurm.backup_controller
    data["slurm"] = {"backup_controller": True}
    assert parse_spec(data, DATA / "valid.yaml").slurm.backup_controller
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    adopted = {"name": "a", "provider": "existing", "slurm_conf": str(conf), "shared_dir": "s"}
    adopted["slurm"] = {"backup_controller": True}
    with pytest.raises(SpecError, match=r"slurm\.backup_controller: is not built by the existing provider"):
        parse_spec(adopted, tmp_path / "a.yaml")
    (tmp_path / "lc").mkdir()
    (tmp_path / "lc" / "on_create.sh").write_text("true\n")
    ssh: dict[str, object] = {
        "name": "s", "provider": "ssh", "lifecycle_scripts": "lc", "shared_dir": "s",
        "instance_groups": [{"name": "c", "role": "controller", "count": 1, "hosts": ["10.0.0.1"]},
                            {"name": "w", "role": "worker", "count": 1, "hosts": ["10.0.0.2"]}],
    }  # fmt: skip
    assert not parse_spec(ssh, tmp_path / "s.yaml").slurm.backup_controller
    ssh["slurm"] = {"backup_controller": "10.0.0.9"}
    s = parse_spec(ssh, tmp_path / "s.yaml").slurm
    assert s.backup_controller and s.backup_host == "10.0.0.9"
    ssh["slurm"] = {"backup_controller": True}  # which host, on the ssh provider?
    with pytest.raises(SpecError, match=r"slurm\.backup_controller: names the backup controller's host"):
        parse_spec(ssh, tmp_path / "s.yaml")


def test_an_adopted_clusters_opt_ins_need_ssh_and_are_the_existing_providers(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    (tmp_path / "spare.sh").write_text("true\n")
    adopted: dict[str, object] = {
        "name": "a",
        "provider": "existing",
        "slurm_conf": str(conf),
        "shared_dir": "s",
    }
    plain = parse_spec(adopted, tmp_path / "a.yaml")
    assert plain.ssh is None and not plain.recovery.health_loops and plain.recovery.spare_script is None
    adopted["recovery"] = {
        "health_loops": True,
        "spare_script": "spare.sh",
        "restart_controller_command": "x $1",
    }
    with pytest.raises(SpecError, match=r"a\.yaml: ssh: is required by recovery\.health_loops"):
        parse_spec(adopted, tmp_path / "a.yaml")
    adopted["ssh"] = {"port": 2222, "python": "/opt/hs/bin/python"}
    spec = parse_spec(adopted, tmp_path / "a.yaml")
    assert spec.ssh is not None and spec.ssh.port == 2222 and spec.ssh.python == "/opt/hs/bin/python"
    r = spec.recovery
    assert (
        r.health_loops and r.spare_script == tmp_path / "spare.sh" and r.restart_controller_command == "x $1"
    )
    adopted["recovery"] = {"spare_script": "missing.sh"}
    with pytest.raises(SpecError, match=r"recovery\.spare_script: no such file: .*missing\.sh"):
        parse_spec(adopted, tmp_path / "a.yaml")
    adopted["recovery"], adopted["ssh"] = {}, {"python": "python3"}
    with pytest.raises(SpecError, match=r"ssh\.python: must be the absolute path"):
        parse_spec(adopted, tmp_path / "a.yaml")
    local = _valid()
    local["recovery"] = {"health_loops": True}  # local and ssh nodes always have their loop
    with pytest.raises(SpecError, match=r"recovery\.health_loops: is the existing provider's"):
        parse_spec(local, DATA / "valid.yaml")
