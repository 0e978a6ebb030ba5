"""Slurm's configuration for a local cluster, written from the spec: slurm.conf, gres.conf, fake GPU
devices, the munge key and the resource config the lifecycle scripts read.

Values come from notes/local-slurm.md, where each was measured: ``config_overrides`` lets nodes claim
CPUs and GPUs the machine lacks; MessageTimeout/SlurmdTimeout/cred_expire and the scheduler intervals
make a lost node and its requeued job take seconds instead of minutes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState, NodeState


def slurm_conf(
    spec: ClusterSpec,
    state: ClusterState,
    *,
    root: Path | None = None,
    hostnames: dict[str, str] | None = None,
) -> str:
    """``root`` and ``hostnames`` (node or controller → the host's own name, as slurmctld and slurmd
    check it) are the ssh provider's: every path under ``root`` on each host, and each node at its
    host's address; without them everything is on this machine at 127.0.0.1."""
    d, r = (root, root) if root else (Path(state.dir), Path(state.run_dir))
    addr = {n.name: (n.host, (hostnames or {})[n.name]) for n in state.nodes} if root else {}
    s = spec.slurm
    workers = [n for n in state.nodes if n.slurm]
    gpus = {g.name: g.gpus_per_node for g in spec.groups}
    pid_dir = ctld_dir(state) if state.backup_controller and not root else d / "state"
    lines = [
        "# Written by hyperscope from " + (state.spec_path or "a spec") + "; rewritten on every create.",
        f"ClusterName={spec.name}",
        *_controllers(state, addr.get(state.controller)),
        f"SlurmctldPort={state.ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={r / 'munge' / 'munge.sock'},cred_expire={s.cred_expire}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={shared_state_dir(state) if root and state.backup_host else d / 'state'}",
        f"SlurmdSpoolDir={r / 'spool'}/%n",
        f"SlurmctldPidFile={pid_dir / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'state'}/slurmd-%n.pid",
        f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_interval=2",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=1",
        "JobRequeue=1",
        f"SlurmdTimeout={s.slurmd_timeout}",
        "SlurmctldTimeout=10",
        f"MessageTimeout={s.message_timeout}",
        "KillWait=2",
        "InactiveLimit=0",
        "MinJobAge=600",
    ]
    if any(gpus[n.group] for n in workers):
        lines.append("GresTypes=gpu")
    for n in workers:
        gres = f" Gres=gpu:{gpus[n.group]}" if gpus[n.group] else ""
        host, name = addr.get(n.name, ("127.0.0.1", "localhost"))
        lines.append(
            f"NodeName={n.name} NodeHostname={name} NodeAddr={host} Port={n.port} "
            f"CPUs={s.cpus_per_node} RealMemory={s.memory_mb}{gres} State=UNKNOWN"
        )
    active = ",".join(n.name for n in workers if not n.spare)
    lines.append(f"PartitionName={s.partition} Nodes={active} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def shared_state_dir(state: ClusterState) -> Path:
    """The ssh provider's StateSaveLocation with a backup controller: on the shared directory (the
    same path on every host), where the backup reads what the primary saved when it takes over."""
    return Path(state.shared_dir) / "slurm-state" / state.name


def ctld_dir(state: ClusterState) -> Path:
    """The primary's pid-file folder; the backup sees its own folder here (a bind mount), since a
    slurmctld starting up kills the process its pid file names."""
    return Path(state.run_dir) / "ctld"


def _controllers(state: ClusterState, host: tuple[str, str] | None) -> list[str]:
    """``SlurmctldHost`` lines. With a backup, each slurmctld runs under its own host name (how
    slurmctld tells whether it is the primary or the backup) and listens only on its own loopback
    address (``NoCtldInAddrAny``), so both share the port on one machine."""
    if not state.backup_controller:
        return ["SlurmctldHost={1}({0})".format(*(host or ("127.0.0.1", "localhost")))]
    if host is not None:  # the ssh provider: each on its own host, under the host's own name
        return [
            "SlurmctldHost={1}({0})".format(*host),
            f"SlurmctldHost={state.backup_controller}({state.backup_host})",
        ]
    return [
        f"SlurmctldHost={state.controller}(127.0.0.1)",
        f"SlurmctldHost={state.backup_controller}(127.0.0.2)",
        "CommunicationParameters=NoCtldInAddrAny",
    ]


def gres_conf(spec: ClusterSpec, state: ClusterState, *, real: bool = False) -> str:
    """One line per GPU node; the devices are per-node character devices (a File= is required,
    and regular files are rejected: see the notes' pitfall 14), or the host's own /dev/nvidiaN
    (``real``, the ssh provider)."""
    gpus = {g.name: g.gpus_per_node for g in spec.groups}
    out = []
    for n in state.nodes:
        k = gpus[n.group] if n.slurm else 0
        if k:
            devs = Path("/dev") if real else Path(state.dir) / "dev" / n.name
            out.append(f"NodeName={n.name} Name=gpu File={devs}/nvidia[0-{k - 1}]")
    return "\n".join(out) + "\n" if out else ""


def fake_gpus(spec: ClusterSpec, state: ClusterState, *, only: str | None = None) -> None:
    """Every GPU node's devices (``only``: one node's, as a re-created node gets them back)."""
    gpus = {g.name: g.gpus_per_node for g in spec.groups}
    for n in state.nodes:
        if n.slurm and gpus[n.group] and only in (None, n.name):
            devs = Path(state.dir) / "dev" / n.name
            devs.mkdir(parents=True, exist_ok=True)
            for i in range(gpus[n.group]):
                dev = devs / f"nvidia{i}"
                if not dev.exists():
                    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # same as /dev/null


def resource_config(state: ClusterState) -> str:
    """The JSON every lifecycle script can read, like HyperPod's resource_config.json."""
    groups: dict[str, list[NodeState]] = {}
    for n in state.nodes:
        groups.setdefault(n.group, []).append(n)
    doc = {
        "ClusterName": state.name,
        "Provider": state.provider,
        "Controller": state.controller,
        "SlurmConf": state.slurm_conf,
        "SharedDir": state.shared_dir,
        "Partition": state.partition,
        "InstanceGroups": [
            {
                "Name": g,
                "Role": ns[0].role,
                "Instances": [{"Name": n.name, "Spare": n.spare, "SlurmNode": n.slurm} for n in ns],
            }
            for g, ns in groups.items()
        ],
    }
    return json.dumps(doc, indent=1) + "\n"


#: the spec as it was at create (or the last update), beside slurm.conf: what an update compares
#: against, since users edit their spec file in place before ``cluster update``
SPEC_COPY = "spec.yaml"


def keep_spec(spec: ClusterSpec, state: ClusterState) -> None:
    """The spec file as it is now, its folders made absolute (the copy lives elsewhere)."""
    if spec.source is None or not spec.source.is_file():
        return
    doc = yaml.safe_load(spec.source.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        return
    if spec.lifecycle_dir is not None:
        doc["lifecycle_scripts"] = str(spec.lifecycle_dir)
    doc["shared_dir"] = str(spec.shared_dir)
    recovery = doc.get("recovery")
    if isinstance(recovery, dict) and spec.recovery.health_checks_dir is not None:
        recovery["health_checks_dir"] = str(spec.recovery.health_checks_dir)
    (Path(state.dir) / "etc" / SPEC_COPY).write_text(yaml.safe_dump(doc), encoding="utf-8")


def write_files(spec: ClusterSpec, state: ClusterState, *, new_key: bool = True) -> None:
    """Everything Slurm reads; ``new_key`` False (an update of a live cluster) keeps munge's key."""
    d = Path(state.dir)
    etc = d / "etc"
    (etc / "slurm.conf").write_text(slurm_conf(spec, state))
    gres = gres_conf(spec, state)
    if gres:
        (etc / "gres.conf").write_text(gres)  # slurmd reads it from slurm.conf's folder
        fake_gpus(spec, state)
    (etc / "resource_config.json").write_text(resource_config(state))
    r = Path(state.run_dir)
    for n in state.nodes:
        if n.slurm:
            (r / "spool" / n.name).mkdir(parents=True, exist_ok=True)
    munge = r / "munge"
    munge.mkdir(parents=True, exist_ok=True)
    r.chmod(0o755)
    munge.chmod(0o755)  # munged refuses a socket folder that is not o+x
    key = munge / "munge.key"
    if new_key or not key.is_file():
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
