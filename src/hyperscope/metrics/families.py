"""The metric families ``hyperscope metrics`` serves, as pure functions of what was observed: a
fleet snapshot (:mod:`hyperscope.cluster.fleet`), this host's GPU readings, and the step times
derived from two heartbeat readings. Nothing here reads a file or runs a command, so every series
is tested on recorded Slurm outputs and logs.

What is not known is left out, never reported as zero: a node Slurm did not describe has no state
series, a host without GPUs no GPU series, a metric a GPU does not report no series for that GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hyperscope.cluster import fleet
from hyperscope.cluster.fleet import Beat, Snapshot

PREFIX = "hyperscope_"


@dataclass(frozen=True, slots=True)
class GpuStat:
    """One GPU as NVML reported it at this scrape; None: this GPU does not report that metric."""

    index: int
    name: str = ""
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_uncorrected: int | None = None
    #: critical XID events seen since the exporter started; None: they cannot be watched on it
    xid_errors: int | None = None
    last_xid: int | None = None  # the code of the newest one


def _gauge(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: Sequence[str]) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, labels=list(labels))


def cluster_families(snap: Snapshot, step_seconds: Mapping[tuple[str, int], float]) -> list[Metric]:
    """Nodes, jobs, goodput and the agent's actions of one cluster."""
    c = snap.state.name
    up = _gauge("slurm_up", "1 when slurmctld answered this scrape's scontrol", ["cluster"])
    up.add_metric([c], 0.0 if snap.slurm_error else 1.0)
    out: list[Metric] = [
        up, *_node_families(snap), *_job_families(snap, step_seconds), *_straggler_families(snap)
    ]  # fmt: skip
    actions = _counter(
        "agent_actions", "agent.log records by decision kind and phase", ["cluster", "kind", "phase"]
    )
    for (kind, phase), n in sorted(fleet.action_counts(snap).items()):
        actions.add_metric([c, kind, phase], float(n))
    last = _gauge(
        "agent_last_decision_timestamp_seconds",
        "When the agent last decided each kind of action on each node or job, with its reason",
        ["cluster", "kind", "target", "reason"],
    )
    latest: dict[tuple[str, str], fleet.Decision] = {}
    for d in fleet.decisions(snap, limit=0):  # newest first: the first seen is the latest
        if d.phase == "decided":
            target = f"job {d.job}" if d.job else ",".join(d.nodes)
            latest.setdefault((d.kind, target), d)
    for (kind, target), d in sorted(latest.items()):
        last.add_metric([c, kind, target, d.reason[:200]], d.time)
    return [*out, actions, last]


def _node_families(snap: Snapshot) -> Iterable[Metric]:
    c = snap.state.name
    labels = ["cluster", "node", "group"]
    state = _gauge(
        "node_slurm_state",
        "1 for the node's current Slurm state (idle, mixed+drain, ...)",
        [*labels, "state"],
    )
    status = _gauge(
        "node_status", "1 for the node's hyperscope status (Running, Replacing, ...)", [*labels, "status"]
    )
    responding = _gauge("node_responding", "1 when the node's slurmd answers Slurm", labels)
    healthy = _gauge("node_healthy", "1 when the node is schedulable with no reason set", labels)
    reason = _gauge(
        "node_reason_info", "The reason Slurm holds for a node (health check, operator)", [*labels, "reason"]
    )
    spare = _gauge("node_spare", "1 for a spare held out of service", labels)
    replaced = _counter("node_replacements", "Times hyperscope replaced the node", labels)
    for n in fleet.nodes(snap):
        key = [c, n.node, n.group]
        status.add_metric([*key, n.status], 1.0)
        spare.add_metric(key, 1.0 if n.spare else 0.0)
        replaced.add_metric(key, float(n.replacements))
        if n.slurm_state:
            state.add_metric([*key, n.slurm_state], 1.0)
        if n.responding is not None:
            responding.add_metric(key, 1.0 if n.responding else 0.0)
        if n.healthy is not None:
            healthy.add_metric(key, 1.0 if n.healthy else 0.0)
        if n.reason:
            reason.add_metric([*key, n.reason[:200]], 1.0)
    return [state, status, responding, healthy, reason, spare, replaced]


def _job_families(snap: Snapshot, step_seconds: Mapping[tuple[str, int], float]) -> Iterable[Metric]:
    c, job = snap.state.name, ["cluster", "slurm_job"]
    state = _gauge("job_state", "1 for the job's current Slurm state", [*job, "name", "state"])
    restarts = _gauge("job_restarts", "Slurm's restart count of the job (requeues)", job)
    attempts = _gauge("job_attempts", "Attempts of the job the catalog recorded", job)
    wall = _gauge("job_wall_seconds", "From the job's first start to its end, or now", job)
    train = _gauge("job_training_seconds", "Time the job's ranks made progress (heartbeats)", job)
    lost = _gauge("job_lost_seconds", "Time lost to failures, restarts and start-up waits", job)
    ratio = _gauge("job_goodput_ratio", "training / wall", job)
    for j in fleet.jobs(snap):
        key = [c, str(j.id)]
        state.add_metric([c, str(j.id), j.name, j.state], 1.0)
        restarts.add_metric(key, float(j.restarts))
        g = j.goodput
        if j.attempts:
            attempts.add_metric(key, float(g.attempts))
        if g.ratio is not None:
            wall.add_metric(key, g.wall_s)
            train.add_metric(key, g.training_s)
            lost.add_metric(key, g.lost_s)
            ratio.add_metric(key, g.ratio)
    rank = [*job, "rank"]
    step = _gauge("job_rank_step", "The last step number the rank's heartbeat reported", rank)
    beat = _gauge("job_rank_heartbeat_timestamp_seconds", "When the rank last beat", rank)
    seconds = _gauge("job_rank_step_seconds", "Mean step time between the last two heartbeat readings", rank)
    for b in sorted(snap.beats, key=lambda b: (b.job, b.rank)):
        key = [c, b.job, str(b.rank)]
        step.add_metric(key, float(b.step))
        beat.add_metric(key, b.ts_ns / 1e9)
        if (b.job, b.rank) in step_seconds:
            seconds.add_metric(key, step_seconds[(b.job, b.rank)])
    return [state, restarts, attempts, wall, train, lost, ratio, step, beat, seconds]


def _straggler_families(snap: Snapshot) -> list[Metric]:
    """Each rank's step time against the median of its job's other ranks (what the agent's
    detection compares with ``recovery.straggler_threshold_pct``), and whether it names it."""
    c, labels = snap.state.name, ["cluster", "slurm_job", "rank", "node"]
    score = _gauge(
        "job_rank_straggler_score",
        "How much slower the rank's last heartbeat window was than the median of the other ranks' "
        "(0.25: 25 % slower; negative: faster)",
        labels,
    )
    named = _gauge("job_rank_straggler", "1 while the agent names the rank a straggler (agent.log)", labels)
    for r in fleet.rank_speeds(snap):
        key = [c, r.job, str(r.rank), r.node]
        score.add_metric(key, r.score)
        named.add_metric(key, 1.0 if r.named else 0.0)
    return [score, named]


#: (job, rank) -> (step, ts_ns) of the reading a step time was last derived from, and that time
StepMemory = dict[tuple[str, int], tuple[int, int, float | None]]


def step_times(memory: StepMemory, beats: Sequence[Beat]) -> tuple[StepMemory, dict[tuple[str, int], float]]:
    """Each rank's mean step time since the reading before, where its step moved; a rank whose
    step did not move keeps its last value (a rank that stopped beating is dropped: its age tells
    more). Returns the memory for the next call and the step times."""
    new: StepMemory = {}
    out: dict[tuple[str, int], float] = {}
    for b in beats:
        key = (b.job, b.rank)
        before = memory.get(key)
        value = before[2] if before else None
        if before is not None and b.step > before[0] and b.ts_ns > before[1]:
            value = (b.ts_ns - before[1]) / 1e9 / (b.step - before[0])
        elif before is not None and b.step == before[0]:
            new[key] = before
            if value is not None:
                out[key] = value
            continue
        new[key] = (b.step, b.ts_ns, value)
        if value is not None:
            out[key] = value
    return new, out


def gpu_families(node: str, gpus: Sequence[GpuStat]) -> list[Metric]:
    """This host's GPUs; no GPU, no series."""
    labels = ["node", "gpu", "name"]
    util = _gauge("gpu_utilization_percent", "GPU busy over NVML's last sample period", labels)
    mem_util = _gauge("gpu_memory_utilization_percent", "Memory controller busy", labels)
    used = _gauge("gpu_memory_used_bytes", "GPU memory in use", labels)
    total = _gauge("gpu_memory_total_bytes", "GPU memory in all", labels)
    temp = _gauge("gpu_temperature_celsius", "GPU temperature", labels)
    power = _gauge("gpu_power_watts", "GPU power draw", labels)
    ecc = _counter("gpu_ecc_uncorrected_errors", "Uncorrectable ECC errors since the driver loaded", labels)
    xid = _counter("gpu_xid_errors", "Critical XID events seen since the exporter started", labels)
    last_xid = _gauge("gpu_last_xid", "The code of the newest critical XID event seen", labels)
    for g in gpus:
        key = [node, str(g.index), g.name]
        for family, value in (
            (util, g.utilization_pct),
            (mem_util, g.memory_utilization_pct),
            (used, g.memory_used_bytes),
            (total, g.memory_total_bytes),
            (temp, g.temperature_c),
            (power, g.power_w),
            (ecc, g.ecc_uncorrected),
            (xid, g.xid_errors),
            (last_xid, g.last_xid),
        ):
            if value is not None:
                family.add_metric(key, float(value))
    return [f for f in (util, mem_util, used, total, temp, power, ecc, xid, last_xid) if f.samples]
