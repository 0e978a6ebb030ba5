"""The cluster spec: a YAML file of instance groups, lifecycle scripts, a shared directory and Slurm settings.

Parsed into frozen dataclasses once, up front, so a provider never meets a half-valid spec: every
problem is reported as ``FILE: KEY.PATH: problem (got VALUE)`` before any daemon starts. Relative
paths are resolved against the spec file's folder, so a spec means the same from any working dir.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from hyperscope.errors import UsageError

Role = Literal["controller", "login", "worker"]
ROLES: tuple[Role, ...] = ("controller", "login", "worker")
PROVIDERS = ("local", "ssh", "existing")
#: Slurm node names and our directory names: keep them to what both accept without quoting.
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class SpecError(UsageError):
    """A cluster spec that cannot be used; names the file, the key path and the bad value."""

    def __init__(self, path: Path | str, key: str, problem: str, value: object = None) -> None:
        self.path = str(path)
        self.key = key
        self.value = value
        message = f"{self.path}: {key}: {problem}" if key else f"{self.path}: {problem}"
        if value is not None:
            message += f" (got {value!r})"
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    name: str
    role: Role
    count: int
    gpus_per_node: int = 0
    spares: int = 0
    #: ssh provider: one address per node (active nodes, then spares), or one for all of them
    hosts: tuple[str, ...] = ()

    def host(self, node: str) -> str:
        return self.hosts[0] if len(self.hosts) == 1 else self.hosts[self.node_names().index(node)]

    def node_names(self) -> list[str]:
        """Active nodes first, then spares: names stay stable when a spare replaces a node."""
        return [f"{self.name}-{i}" for i in range(1, self.count + self.spares + 1)]

    def is_spare(self, node: str) -> bool:
        return int(node.rsplit("-", 1)[1]) > self.count


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """What a user may want to tune; the defaults are the measured fast-recovery values."""

    partition: str = "dev"
    cpus_per_node: int = 2
    memory_mb: int = 1000
    slurmd_timeout: int = 5
    message_timeout: int = 2
    cred_expire: int = 5
    #: First TCP port (slurmctld); nodes use the following ones. 0 = pick free ports at create.
    port_base: int = 0
    #: a second slurmctld (Slurm's backup controller, ``SlurmctldHost`` twice) that takes over
    #: when the primary is gone: ``true`` on the local provider (state in the cluster's folder);
    #: on the ssh provider the spec names the backup's host instead, and both keep their state on
    #: the shared directory
    backup_controller: bool = False
    #: the ssh provider's backup controller host (``slurm.backup_controller: HOST``)
    backup_host: str = ""


#: what the agent does about a straggler (recovery.straggler_action)
STRAGGLER_ACTIONS = ("notify", "profile", "replace", "off")


@dataclass(frozen=True, slots=True)
class RecoverySettings:
    """The resilience of a local cluster (docs/resilience.md): Slurm's health check every
    ``health_check_interval`` s, and the agent on the controller that replaces failed nodes and
    requeues hung jobs. ``agent: false`` leaves recovery to plain Slurm (what the benchmark compares)."""

    agent: bool = True
    health_check_interval: int = 5
    #: a job whose every rank has been silent this long (heartbeats) is treated as failed
    hang_timeout_s: int = 300
    #: hung-job requeues before the agent stops the job instead
    max_attempts: int = 3
    max_reboots: int = 1
    #: ssh/existing: how a node is rebooted (IPMI, a cloud CLI, ``ssh $2 reboot``), run with
    #: ``bash -c`` on the agent's machine, the node as ``$1`` and its host as ``$2``; "" = restart
    #: its slurmd over ssh (ssh), open a ticket (existing)
    reboot_command: str = ""
    #: ssh/existing: how a node is replaced by new hardware at the same name; "" = a ticket
    replace_command: str = ""
    #: run (as above, the reason as ``$3``) when a node needs what the agent cannot do: a ticket
    ticket_command: str = ""
    #: existing: how a controller found DOWN by ``scontrol ping`` is started again (its name as
    #: ``$1``, its address as ``$2``); "" = the operator's controllers are never restarted, only logged
    restart_controller_command: str = ""
    #: existing: how ``cluster update-software`` updates one drained node (as above); "" = refused
    update_command: str = ""
    #: the brake on automatic replacements: at most this many in any ``replacement_window_s`` s
    max_replacements: int = 4
    replacement_window_s: int = 600
    #: a folder of the user's own health checks (executables), run by every periodic check
    health_checks_dir: Path | None = None
    #: seconds between DCGM diagnostics (``dcgmi diag -r 1``) on a node; not in every check
    dcgm_interval_s: int = 3600
    #: stragglers (docs/resilience.md): a rank this many % slower than the median of the others
    #: for ``straggler_steps`` consecutive steps; ``straggler_action`` notify, profile, replace or off
    straggler_threshold_pct: int = 10
    straggler_steps: int = 20
    straggler_action: str = "notify"
    straggler_profile_steps: int = 10
    #: existing (opt-in, with ``ssh:``): one health loop per node, started over ssh on its host
    #: (``NodeAddr``), that drains the node when a check fails; ssh and local nodes always have one
    health_loops: bool = False
    #: existing (with ``ssh:``): a script run over ssh on a spare before it joins a partition (as
    #: HyperPod runs lifecycle scripts on replacements); a spare it fails on is left out, a ticket
    spare_script: Path | None = None


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How the ssh provider reaches its hosts with the system's OpenSSH; root, because slurmd
    must run as root."""

    user: str = "root"
    port: int = 22
    identity_file: Path | None = None
    options: tuple[str, ...] = ()  # extra ``-o`` options, e.g. StrictHostKeyChecking=no
    #: on every host: the cluster's configuration, logs, spool and munge socket (short: socket paths)
    remote_dir: str = "/var/lib/hyperscope"
    #: on every host: a Python with hyperscope installed (each node's health loop); "" = this
    #: machine's own interpreter path (hosts that mount the same software)
    python: str = ""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    provider: str
    groups: tuple[InstanceGroup, ...]
    lifecycle_dir: Path | None  # None only for the existing provider (nothing to configure)
    shared_dir: Path
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    source: Path | None = None
    #: the existing provider: the slurm.conf of a cluster the user already runs
    slurm_conf: Path | None = None
    #: the ssh provider's; the existing provider's for its opt-ins (health_loops, spare_script)
    ssh: SshSettings | None = None
    recovery: RecoverySettings = field(default_factory=RecoverySettings)

    @property
    def on_create(self) -> Path:
        if self.lifecycle_dir is None:
            raise SpecError(self.source or "spec", "lifecycle_scripts", "is required by this provider")
        return self.lifecycle_dir / "on_create.sh"

    def groups_with(self, role: Role) -> list[InstanceGroup]:
        return [g for g in self.groups if g.role == role]

    def slurm_nodes(self) -> list[tuple[InstanceGroup, str]]:
        """Nodes that run a slurmd: every worker, spares included (warm standbys, in no partition)."""
        return [(g, n) for g in self.groups_with("worker") for n in g.node_names()]

    def all_nodes(self) -> list[tuple[InstanceGroup, str]]:
        return [(g, n) for g in self.groups for n in g.node_names()]


def _int(src: Path, key: str, value: object, *, minimum: int, maximum: int = 1 << 16) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(src, key, "must be a whole number", value)
    if not minimum <= value <= maximum:
        raise SpecError(src, key, f"must be between {minimum} and {maximum}", value)
    return value


def _name(src: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise SpecError(src, key, "must be lower-case letters, digits and '-', starting with a letter", value)
    return value


def _mapping(src: Path, key: str, value: object, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(src, key or "(top level)", "must be a mapping of keys to values", value)
    for k in value:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise SpecError(src, where, f"unknown key; expected one of {', '.join(sorted(allowed))}")
    return cast(dict[str, Any], value)


_HOST = re.compile(r"^[A-Za-z0-9_.:-]{1,253}$")


def _hosts(src: Path, key: str, value: object, nodes: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(src, key, "must be a non-empty list of host names or addresses", value)
    for i, h in enumerate(value):
        if not isinstance(h, str) or not _HOST.match(h):
            raise SpecError(src, f"{key}[{i}]", "must be a host name or address", h)
    if len(value) not in (1, nodes):
        raise SpecError(
            src, key, f"must name one host for all nodes or one per node ({nodes}: count + spares)", value
        )
    return tuple(value)


def _ssh(src: Path, raw: object) -> SshSettings:
    d = _mapping(src, "ssh", {} if raw is None else raw, set(SshSettings.__slots__))
    options = d.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) and "=" in o for o in options):
        raise SpecError(src, "ssh.options", "must be a list of OpenSSH Key=Value options", options)
    user = d.get("user", "root")
    if not isinstance(user, str) or not re.fullmatch(r"[a-z_][a-z0-9_-]*", user):
        raise SpecError(src, "ssh.user", "must be a user name", user)
    remote = d.get("remote_dir", "/var/lib/hyperscope")
    if not isinstance(remote, str) or not remote.startswith("/") or len(remote) > 40 or " " in remote:
        raise SpecError(src, "ssh.remote_dir", "must be an absolute path of at most 40 characters", remote)
    key = d.get("identity_file")
    py = d.get("python", "")
    if not isinstance(py, str) or (py and not py.startswith("/")):
        raise SpecError(src, "ssh.python", "must be the absolute path of a Python on every host", py)
    return SshSettings(
        python=py,
        user=user,
        port=_int(src, "ssh.port", d.get("port", 22), minimum=1, maximum=65535),
        identity_file=None if key is None else _dir(src, "ssh.identity_file", key),
        options=tuple(options),
        remote_dir=remote.rstrip("/") or "/",
    )


def _group(src: Path, key: str, raw: object, ssh: bool = False) -> InstanceGroup:
    d = _mapping(src, key, raw, {"name", "role", "count", "gpus_per_node", "spares", "hosts"})
    if ssh and "hosts" not in d:
        raise SpecError(src, f"{key}.hosts", "is required by the ssh provider")
    if not ssh and "hosts" in d:
        raise SpecError(src, f"{key}.hosts", "is only used by the ssh provider")
    for required in ("name", "role", "count"):
        if required not in d:
            raise SpecError(src, f"{key}.{required}", "is required")
    role = d["role"]
    if role not in ROLES:
        raise SpecError(src, f"{key}.role", f"must be one of {', '.join(ROLES)}", role)
    count = _int(src, f"{key}.count", d["count"], minimum=1, maximum=256)
    spares = _int(src, f"{key}.spares", d.get("spares", 0), minimum=0, maximum=256)
    if spares and role != "worker":
        raise SpecError(src, f"{key}.spares", "only worker groups have spares", spares)
    if role == "controller" and count != 1:
        raise SpecError(src, f"{key}.count", "a controller group has exactly one node", count)
    return InstanceGroup(
        name=_name(src, f"{key}.name", d["name"]),
        role=role,
        count=count,
        gpus_per_node=_int(src, f"{key}.gpus_per_node", d.get("gpus_per_node", 0), minimum=0, maximum=64),
        spares=spares,
        hosts=_hosts(src, f"{key}.hosts", d["hosts"], count + spares) if ssh else (),
    )


def _slurm(src: Path, raw: object, *, ssh: bool = False) -> SlurmSettings:
    d = _mapping(src, "slurm", {} if raw is None else raw, set(SlurmSettings.__slots__))
    defaults = SlurmSettings()
    limits = {
        "cpus_per_node": (1, 1024),
        "memory_mb": (100, 1 << 24),
        "slurmd_timeout": (1, 3600),
        "message_timeout": (1, 600),
        "cred_expire": (5, 3600),  # Slurm rejects less than 5 ("AuthInfo=cred_expire=%d invalid")
        "port_base": (0, 65000),
    }
    values: dict[str, Any] = {}
    for k, (lo, hi) in limits.items():
        values[k] = _int(src, f"slurm.{k}", d.get(k, getattr(defaults, k)), minimum=lo, maximum=hi)
    if 0 < values["port_base"] < 1024:
        raise SpecError(
            src, "slurm.port_base", "must be 0 (pick free ports) or at least 1024", values["port_base"]
        )
    values["partition"] = _name(src, "slurm.partition", d.get("partition", defaults.partition))
    backup = d.get("backup_controller", defaults.backup_controller)
    if ssh:
        if backup is not False and (not isinstance(backup, str) or not _HOST.match(backup)):
            raise SpecError(
                src, "slurm.backup_controller",
                "names the backup controller's host on the ssh provider (a host name or address)", backup,
            )  # fmt: skip
        values["backup_controller"], values["backup_host"] = bool(backup), backup or ""
    elif not isinstance(backup, bool):
        raise SpecError(src, "slurm.backup_controller", "must be true or false", backup)
    else:
        values["backup_controller"] = backup
    return SlurmSettings(**values)


def _recovery(src: Path, raw: object, *, adopted: bool = False) -> RecoverySettings:
    """``adopted`` (the existing provider): the agent acts on someone else's cluster only when the
    spec says ``agent: true``."""
    d = _mapping(src, "recovery", {} if raw is None else raw, set(RecoverySettings.__slots__))
    defaults = RecoverySettings()
    agent = d.get("agent", defaults.agent and not adopted)
    if not isinstance(agent, bool):
        raise SpecError(src, "recovery.agent", "must be true or false", agent)
    limits = {
        "health_check_interval": (1, 3600),
        "hang_timeout_s": (2, 7 * 86400),
        "max_attempts": (0, 100),
        "max_reboots": (0, 100),
        "max_replacements": (0, 100_000),
        "replacement_window_s": (1, 7 * 86400),
        "dcgm_interval_s": (60, 30 * 86400),
        "straggler_threshold_pct": (1, 10_000),
        "straggler_steps": (1, 1_000_000),
        "straggler_profile_steps": (1, 100_000),
    }
    values: dict[str, Any] = {
        k: _int(src, f"recovery.{k}", d.get(k, getattr(defaults, k)), minimum=lo, maximum=hi)
        for k, (lo, hi) in limits.items()
    }
    for k in (
        "reboot_command",
        "replace_command",
        "ticket_command",
        "update_command",
        "restart_controller_command",
    ):
        command = d.get(k, "")
        if not isinstance(command, str):
            raise SpecError(src, f"recovery.{k}", "must be a shell command (a string)", command)
        values[k] = command.strip()
    action = d.get("straggler_action", defaults.straggler_action)
    if action not in STRAGGLER_ACTIONS:
        choices = ", ".join(STRAGGLER_ACTIONS)
        raise SpecError(src, "recovery.straggler_action", f"must be one of {choices}", action)
    values["straggler_action"] = action
    loops = d.get("health_loops", False)
    if not isinstance(loops, bool):
        raise SpecError(src, "recovery.health_loops", "must be true or false", loops)
    values["health_loops"] = loops
    if d.get("spare_script") is not None:
        script = _dir(src, "recovery.spare_script", d["spare_script"])
        if not script.is_file():
            raise SpecError(src, "recovery.spare_script", f"no such file: {script}", d["spare_script"])
        values["spare_script"] = script
    if not adopted and (loops or "spare_script" in d):
        key = "health_loops" if loops else "spare_script"
        raise SpecError(src, f"recovery.{key}", "is the existing provider's (its nodes are not ours)", d[key])
    if d.get("health_checks_dir") is not None:
        checks = _dir(src, "recovery.health_checks_dir", d["health_checks_dir"])
        if not checks.is_dir():
            raise SpecError(
                src, "recovery.health_checks_dir", f"no such folder: {checks}", d["health_checks_dir"]
            )
        values["health_checks_dir"] = checks
    return RecoverySettings(agent=agent, **values)


def _dir(src: Path, key: str, value: object) -> Path:
    if not isinstance(value, str) or not value:
        raise SpecError(src, key, "must be a path (relative paths start at the spec's folder)", value)
    p = Path(value).expanduser()
    return (p if p.is_absolute() else src.parent / p).resolve()


def _groups(source: Path, raw_groups: object, ssh: bool) -> tuple[InstanceGroup, ...]:
    if not isinstance(raw_groups, list) or not raw_groups:
        raise SpecError(source, "instance_groups", "must be a non-empty list of groups", raw_groups)
    groups = tuple(_group(source, f"instance_groups[{i}]", g, ssh) for i, g in enumerate(raw_groups))
    seen: set[str] = set()
    for i, g in enumerate(groups):
        if g.name in seen:
            raise SpecError(source, f"instance_groups[{i}].name", "is used by another group", g.name)
        seen.add(g.name)
    for role in ("controller", "worker"):
        if not any(g.role == role for g in groups):
            raise SpecError(source, "instance_groups", f"needs a group with role {role}")
    if sum(g.role == "controller" for g in groups) > 1:
        raise SpecError(source, "instance_groups", "has more than one controller group")
    return groups


def parse_spec(data: object, source: Path) -> ClusterSpec:
    """Validate an already-loaded YAML document; ``source`` names the file in every message.

    The existing provider adopts a running Slurm: it names its ``slurm_conf`` and has neither
    instance groups nor lifecycle scripts (hyperscope starts nothing there)."""
    top = {"name", "provider", "instance_groups", "lifecycle_scripts", "shared_dir", "slurm"}
    top |= {"slurm_conf", "ssh", "recovery"}
    d = _mapping(source, "", data, top)
    provider = d.get("provider", "local")
    if provider not in PROVIDERS:
        raise SpecError(source, "provider", f"must be one of {', '.join(PROVIDERS)}", provider)
    existing = provider == "existing"
    required = [
        "name",
        "shared_dir",
        *(["slurm_conf"] if existing else ["instance_groups", "lifecycle_scripts"]),
    ]
    for key in required:
        if key not in d:
            raise SpecError(source, key, "is required" + (" by the existing provider" if existing else ""))
    unused: tuple[str, ...] = ("instance_groups", "lifecycle_scripts") if existing else ("slurm_conf",)
    unused += () if provider in ("ssh", "existing") else ("ssh",)
    for key in unused:
        if key in d:
            raise SpecError(source, key, f"is not used by the {provider} provider")
    backup = d.get("slurm")
    if existing and isinstance(backup, dict) and backup.get("backup_controller"):
        raise SpecError(
            source, "slurm.backup_controller",
            "is not built by the existing provider: name a second SlurmctldHost in your own "
            "slurm.conf (the agent talks to whichever controller answers)", True,
        )  # fmt: skip
    lifecycle: Path | None = None
    slurm_conf: Path | None = None
    if existing:
        slurm_conf = _dir(source, "slurm_conf", d["slurm_conf"])
        if not slurm_conf.is_file():
            raise SpecError(source, "slurm_conf", f"no such file: {slurm_conf}", d["slurm_conf"])
    else:
        lifecycle = _dir(source, "lifecycle_scripts", d["lifecycle_scripts"])
        if not (lifecycle / "on_create.sh").is_file():
            raise SpecError(
                source, "lifecycle_scripts", f"has no on_create.sh in {lifecycle}", d["lifecycle_scripts"]
            )
    recovery = _recovery(source, d.get("recovery"), adopted=existing)
    if existing and (recovery.health_loops or recovery.spare_script) and "ssh" not in d:
        raise SpecError(
            source, "ssh", "is required by recovery.health_loops and recovery.spare_script (how hyperscope "
            "reaches the nodes at their NodeAddr)",
        )  # fmt: skip
    return ClusterSpec(
        name=_name(source, "name", d["name"]),
        provider=provider,
        groups=() if existing else _groups(source, d["instance_groups"], provider == "ssh"),
        lifecycle_dir=lifecycle,
        shared_dir=_dir(source, "shared_dir", d["shared_dir"]),
        slurm=_slurm(source, d.get("slurm"), ssh=provider == "ssh"),
        source=source.resolve(),
        slurm_conf=slurm_conf,
        ssh=_ssh(source, d.get("ssh")) if provider == "ssh" or "ssh" in d else None,
        recovery=recovery,
    )


def load_spec(path: Path | str) -> ClusterSpec:
    """Read and validate a spec file; YAML syntax errors carry the line and column."""
    src = Path(path)
    try:
        text = src.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(src, "", f"cannot read the spec: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise SpecError(src, "", f"{where}not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    return parse_spec(data, src)
