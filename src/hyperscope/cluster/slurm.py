"""The Slurm adapter: one seam that runs Slurm's commands, and pure parsers of what they print.

Everything hyperscope knows about a cluster's live state comes through here. The seam exists so the
parsers can be tested on outputs recorded from a real Slurm 22.05 (tests/data/cluster_slurm_outputs)
and so every failure reads the same: the command, its exit status and Slurm's own message.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperscope.errors import HyperscopeError
from hyperscope.store.catalog import JobStatus

#: (argv, env, timeout) -> completed process; tests pass a fake, the library uses subprocess.
Runner = Callable[[Sequence[str], dict[str, str], float], "subprocess.CompletedProcess[str]"]
SINFO_FORMAT = "%N|%T|%P|%G|%E"
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")


class SlurmError(HyperscopeError):
    """A Slurm command that failed or is missing; carries what Slurm printed."""


def _run(argv: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False)


class Slurm:
    """Runs Slurm client commands against one cluster (its ``slurm.conf``), never the system's."""

    def __init__(self, conf: Path, runner: Runner | None = None) -> None:
        self.conf = conf
        self._runner = runner or _run

    def env(self) -> dict[str, str]:
        """The environment a user needs for plain ``sbatch``/``srun`` against this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(
        self, *argv: str, timeout: float = 30.0, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        shown = " ".join(argv)
        try:
            done = self._runner(argv, {**self.env(), **(env or {})}, timeout)
        except FileNotFoundError as exc:
            raise SlurmError(
                f"`{argv[0]}` is not installed: install Debian's slurm-wlm and munge "
                "(apt-get install --no-install-recommends slurm-wlm munge)"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(
                f"`{shown}` (SLURM_CONF={self.conf}) gave no answer within {timeout:g} s"
            ) from exc
        if check and done.returncode != 0:
            said = (done.stderr or done.stdout).strip() or "(no output)"
            raise SlurmError(
                f"`{shown}` (SLURM_CONF={self.conf}) failed with status {done.returncode}: {said}"
            )
        return done

    def ping(self) -> bool:
        """True when slurmctld answers; never raises for a controller that is down."""
        done = self.run("scontrol", "ping", timeout=10, check=False)
        return done.returncode == 0 and " is UP" in done.stdout

    def controllers(self) -> dict[str, str]:
        """Each controller's host name and what ``scontrol ping`` says of it (UP, DOWN); {} when
        scontrol cannot be run."""
        done = self.run("scontrol", "ping", timeout=10, check=False)
        return parse_ping(done.stdout)

    def nodes(self) -> list[Node]:
        return parse_show_node(self.run("scontrol", "show", "node", "-o").stdout)

    def sinfo(self) -> list[SinfoRow]:
        return parse_sinfo(self.run("sinfo", "-N", "-h", "-o", SINFO_FORMAT).stdout)

    def config(self) -> dict[str, str]:
        return parse_config(self.run("scontrol", "show", "config").stdout)

    def version(self) -> str:
        return parse_version(self.run("scontrol", "--version").stdout)

    def jobs(self) -> list[Job]:
        """Every job slurmctld still remembers (finished ones for MinJobAge seconds)."""
        return parse_show_job(self.run("scontrol", "show", "job", "-o").stdout)

    def submit(self, *sbatch_args: str, env: dict[str, str] | None = None) -> int:
        """``sbatch --parsable ARGS`` with ``env`` added to the job's environment; the job id. With
        ``--wait``/``-W`` sbatch returns when the job ends, so the limit is then 11 days (selectors
        reject more than ~24)."""
        waits = any(a in ("--wait", "-W") for a in sbatch_args)
        argv = ("sbatch", "--parsable", *sbatch_args)
        done = self.run(*argv, timeout=1e6 if waits else 60.0, env=env, check=False)
        try:  # with --wait, sbatch exits with the job's status: a failed job was still submitted
            return parse_sbatch(done.stdout)
        except SlurmError:
            if done.returncode == 0:
                raise
        said = (done.stderr or done.stdout).strip() or "(no output)"
        raise SlurmError(
            f"`{' '.join(argv)}` (SLURM_CONF={self.conf}) failed with status {done.returncode}: {said}"
        )


@dataclass(frozen=True, slots=True)
class Node:
    """One line of ``scontrol show node -o``; ``state`` is the base state, ``flags`` the rest."""

    name: str
    state: str
    flags: tuple[str, ...]
    partitions: tuple[str, ...]
    gres: str
    reason: str
    cpus: int
    cpus_alloc: int
    port: int | None
    slurmd_start: str
    fields: dict[str, str]

    @property
    def available(self) -> bool:
        """Schedulable now: up, and neither drained, draining nor silent."""
        bad = {"DRAIN", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED"}
        return self.state in {"IDLE", "MIXED", "ALLOCATED"} and not bad.intersection(self.flags)

    @property
    def display_state(self) -> str:
        """What an operator expects to read: ``idle``, ``idle+drain``, ``down+not_responding``."""
        return "+".join((self.state, *self.flags)).lower()


#: Reasons Slurm gives by itself to a node it sets DOWN or DRAIN (lower-case prefixes): a node with
#: one of these was not taken out by a person.
SLURM_REASONS = (
    "not responding",
    "node unexpectedly rebooted",
    "kill task failed",
    "prolog error",
    "prolog failed",
    "epilog error",
    "batch job complete failure",
    "low realmemory",
    "low cpus",
    "low socket",
    "low tmpdisk",
    "gres/",
    "duplicate jobid",
    "no network address",
    "slurmdspooldir is full",
    "reboot",
)


def operator_reason(reason: str) -> bool:
    """Whether a node's Slurm reason was written by a person: not empty, not hyperscope's own
    (``hyperscope: …`` from the health check, ``hyperscope agent: …``, the ``Action:`` marks) and
    not one Slurm gives by itself."""
    r = reason.strip().lower()
    return bool(r) and not r.startswith(("hyperscope", "action:", *SLURM_REASONS))


@dataclass(frozen=True, slots=True)
class SinfoRow:
    node: str
    state: str  # sinfo's long form: idle, mixed, drained, down* ...
    partition: str
    default_partition: bool
    gres: str
    reason: str


def parse_fields(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``-o`` line; values may hold spaces (OS=, Reason=), so a value runs
    up to the next ``Key=``. An empty value (``AllocTRES=``) stays ''."""
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def _int_or(value: str | None, default: int) -> int:
    return int(value) if value is not None and value.isdigit() else default


def parse_show_node(text: str) -> list[Node]:
    nodes: list[Node] = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = parse_fields(line)
        state, *flags = (f.get("State") or "UNKNOWN").split("+")
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", f.get("Reason", ""))  # drop "[root@time]"
        parts = f.get("Partitions", "")
        port = f.get("Port")
        nodes.append(
            Node(
                name=f["NodeName"],
                state=state.rstrip("*"),
                flags=tuple(flags),
                partitions=tuple(p for p in parts.split(",") if p),
                gres="" if f.get("Gres") in (None, "(null)") else f["Gres"],
                reason=reason,
                cpus=_int_or(f.get("CPUTot"), 0),
                cpus_alloc=_int_or(f.get("CPUAlloc"), 0),
                port=int(port) if port and port.isdigit() else None,
                slurmd_start=f.get("SlurmdStartTime", ""),
                fields=f,
            )
        )
    return nodes


@dataclass(frozen=True, slots=True)
class Job:
    """One line of ``scontrol show job -o``."""

    id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, NODE_FAIL, ...
    reason: str
    exit_code: str  # "3:0" = status 3, signal 0
    nodes: str  # Slurm's hostlist, "" while pending
    num_nodes: int
    restarts: int
    fields: dict[str, str]

    @property
    def status(self) -> JobStatus:
        return job_status(self.state)


#: Slurm job state → the jobs catalog's status (the UI's jobs page), as issue 7 specifies.
_JOB_STATUS = {
    "PENDING": JobStatus.IN_PROGRESS,
    "CONFIGURING": JobStatus.IN_PROGRESS,
    "RUNNING": JobStatus.IN_PROGRESS,
    "REQUEUED": JobStatus.IN_PROGRESS,
    "REQUEUE_HOLD": JobStatus.IN_PROGRESS,
    "REQUEUE_FED": JobStatus.IN_PROGRESS,
    "RESIZING": JobStatus.IN_PROGRESS,
    "SUSPENDED": JobStatus.IN_PROGRESS,
    "COMPLETED": JobStatus.COMPLETED,
    "FAILED": JobStatus.FAILED,
    "NODE_FAIL": JobStatus.FAILED,
    "TIMEOUT": JobStatus.FAILED,
    "OUT_OF_MEMORY": JobStatus.FAILED,
    "BOOT_FAIL": JobStatus.FAILED,
    "DEADLINE": JobStatus.FAILED,
    "PREEMPTED": JobStatus.FAILED,
    "CANCELLED": JobStatus.STOPPED,
    "REVOKED": JobStatus.STOPPED,
    "COMPLETING": JobStatus.STOPPING,
    "STOPPED": JobStatus.STOPPING,
    "SIGNALING": JobStatus.STOPPING,
    "STAGE_OUT": JobStatus.STOPPING,
}


def job_status(state: str) -> JobStatus:
    """``CANCELLED by 0`` (squeue's long form) reads as CANCELLED; an unknown state is an error so
    a new Slurm state is noticed, never shown as the wrong status."""
    base = state.split()[0].rstrip("+").upper() if state.strip() else ""
    try:
        return _JOB_STATUS[base]
    except KeyError:
        raise SlurmError(f"unknown Slurm job state {state!r}") from None


def parse_show_job(text: str) -> list[Job]:
    jobs: list[Job] = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        f = parse_fields(line)
        nodes = f.get("NodeList", "")
        jobs.append(
            Job(
                id=int(f["JobId"]),
                name=f.get("JobName", ""),
                state=f.get("JobState", ""),
                reason="" if f.get("Reason") in (None, "None") else f["Reason"],
                exit_code=f.get("ExitCode", ""),
                nodes="" if nodes == "(null)" else nodes,
                num_nodes=_int_or(f.get("NumNodes", "").split("-")[0], 0),  # pending: "4-4" (min-max)
                restarts=_int_or(f.get("Restarts"), 0),
                fields=f,
            )
        )
    return jobs


def parse_sbatch(text: str) -> int:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    first = text.strip().split(";")[0]
    if not first.isdigit():
        raise SlurmError(f"sbatch printed no job id: {text.strip()!r}")
    return int(first)


def parse_sinfo(text: str) -> list[SinfoRow]:
    """Rows of ``sinfo -N -h -o '%N|%T|%P|%G|%E'`` (:data:`SINFO_FORMAT`)."""
    rows: list[SinfoRow] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5:
            raise SlurmError(f"unexpected sinfo line (wanted {SINFO_FORMAT}): {line!r}")
        node, state, partition, gres, reason = parts
        rows.append(
            SinfoRow(
                node=node,
                state=state,
                partition=partition.rstrip("*"),
                default_partition=partition.endswith("*"),
                gres="" if gres == "(null)" else gres,
                reason="" if reason == "none" else reason,
            )
        )
    return rows


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = Value`` lines; later sections (cgroup, mpi) included."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_version(text: str) -> str:
    """``slurm-wlm 22.05.8`` or ``slurm 23.11.4`` → ``22.05.8``."""
    m = re.search(r"\b(\d+\.\d+\.\d+)\b", text)
    if m is None:
        raise SlurmError(f"no Slurm version in {text.strip()!r}")
    return m.group(1)


_PING = re.compile(r"^Slurmctld\((?:primary|backup\d*)\) at (\S+) is (\w+)", re.M)


def parse_ping(text: str) -> dict[str, str]:
    """``Slurmctld(primary) at c1 is UP`` lines (one per ``SlurmctldHost``) → ``{"c1": "UP"}``."""
    return {host: state for host, state in _PING.findall(text)}
