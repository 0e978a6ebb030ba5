"""The metric families, built from outputs recorded on a real local cluster (tests/data/metrics:
``scontrol show node/job -o``, agent.log, the heartbeats and the catalog's attempts of a 2-rank
job requeued once, the spare drained by an operator) and from GPU readings; read back through
prometheus-client's own text format and parser."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hyperscope.cluster.fleet import Beat, Snapshot
from hyperscope.cluster.state import ClusterState
from hyperscope.metrics import GpuStat, cluster_families, gpu_families, step_times
from hyperscope.store.attempts import Attempt

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def recorded() -> Snapshot:
    state = ClusterState.load(DATA)
    attempts = {
        int(k): [Attempt(*a) for a in v] for k, v in json.loads((DATA / "attempts.json").read_text()).items()
    }
    catalog = {int(k): tuple(v) for k, v in json.loads((DATA / "catalog.json").read_text()).items()}
    return Snapshot(
        state=state,
        show_node=(DATA / "show_node.txt").read_text(),
        show_job=(DATA / "show_job.txt").read_text(),
        slurm_error="",
        log=[json.loads(line) for line in (DATA / "agent.log").read_text().splitlines()],
        beats=[Beat(*b) for b in json.loads((DATA / "beats.json").read_text())],
        attempts=attempts,
        catalog=catalog,  # type: ignore[arg-type]
        now_ns=int((DATA / "now_ns").read_text()),
    )


def scrape(families: list[object]) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """What a scrape of these families reads: name -> {sorted labels: value}."""

    class Fixed:
        def collect(self) -> list[object]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_nodes_state_health_reason_and_spares_from_recorded_slurm() -> None:
    got = scrape(cluster_families(recorded(), {}))
    key = lambda node: (("cluster", "rs"), ("group", "workers"), ("node", node))  # noqa: E731
    assert got["hyperscope_node_healthy"] == {key("workers-1"): 1, key("workers-2"): 1, key("workers-3"): 0}
    assert got["hyperscope_node_responding"] == {
        key("workers-1"): 1,
        key("workers-2"): 1,
        key("workers-3"): 1,
    }
    assert got["hyperscope_node_slurm_state"] == {
        (*key("workers-1"), ("state", "mixed")): 1,
        (*key("workers-2"), ("state", "mixed")): 1,
        (*key("workers-3"), ("state", "idle+drain")): 1,
    }
    assert got["hyperscope_node_reason_info"] == {(*key("workers-3"), ("reason", "disk swap, ticket 42")): 1}
    assert (
        got["hyperscope_node_spare"][key("workers-3")] == 1
        and got["hyperscope_node_spare"][key("workers-1")] == 0
    )
    # the controller runs no slurmd: its status is known, its Slurm state and health are not (absent)
    controller = (("cluster", "rs"), ("group", "controller"), ("node", "controller-1"))
    assert (*controller, ("status", "Running")) in got["hyperscope_node_status"]
    assert controller not in got["hyperscope_node_healthy"]
    assert got["hyperscope_slurm_up"] == {(("cluster", "rs"),): 1}


def test_agent_actions_by_kind_with_the_reason_of_the_last_decision() -> None:
    got = scrape(cluster_families(recorded(), {}))
    assert got["hyperscope_agent_actions_total"] == {
        (("cluster", "rs"), ("kind", kind), ("phase", phase)): 1
        for kind, phase in (("start", "done"), ("leave", "decided"), ("release", "done"))
    }
    (labels, when), *_ = got["hyperscope_agent_last_decision_timestamp_seconds"].items()
    assert dict(labels) == {
        "cluster": "rs",
        "kind": "leave",
        "target": "workers-3",
        "reason": "taken out of service by an operator (drain: disk swap, ticket 42): left alone",
    }
    assert when == 1796128710.462
    assert len(got["hyperscope_agent_last_decision_timestamp_seconds"]) == 1  # only decisions


def test_job_attempts_restarts_goodput_and_rank_steps() -> None:
    snap = recorded()
    got = scrape(cluster_families(snap, {("1", 0): 0.055, ("1", 1): 0.06}))
    job = (("cluster", "rs"), ("slurm_job", "1"))
    assert got["hyperscope_job_state"] == {
        (("cluster", "rs"), ("name", "rs-wrap"), ("slurm_job", "1"), ("state", "RUNNING")): 1
    }
    assert got["hyperscope_job_restarts"] == {job: 1} and got["hyperscope_job_attempts"] == {job: 2}
    # attempt 0: start 704.0 .. last beat 712.43 (requeued at 713.58); attempt 1: 714.0 .. beat 724.84
    train = (712.428689152 - 704.0) + (1796128724.843022384 - 1796128714.0)
    wall = (snap.now_ns - 1796128704000000000) / 1e9
    assert abs(got["hyperscope_job_training_seconds"][job] - train) < 1e-6
    assert abs(got["hyperscope_job_wall_seconds"][job] - wall) < 1e-6
    assert abs(got["hyperscope_job_lost_seconds"][job] - (wall - train)) < 1e-6
    assert abs(got["hyperscope_job_goodput_ratio"][job] - train / wall) < 1e-6
    rank = lambda r: (("cluster", "rs"), ("rank", r), ("slurm_job", "1"))  # noqa: E731
    assert got["hyperscope_job_rank_step"] == {rank("0"): 181, rank("1"): 181}
    assert got["hyperscope_job_rank_step_seconds"] == {rank("0"): 0.055, rank("1"): 0.06}


def test_slurm_not_answering_is_said_and_its_series_are_absent() -> None:
    snap = recorded()
    down = Snapshot(
        snap.state, "", "", "slurmctld gave no answer", snap.log, [], snap.attempts, snap.catalog, snap.now_ns
    )
    got = scrape(cluster_families(down, {}))
    assert got["hyperscope_slurm_up"] == {(("cluster", "rs"),): 0}
    assert "hyperscope_node_healthy" not in got and "hyperscope_node_slurm_state" not in got
    assert "hyperscope_node_status" in got  # ours, from the state file, still known


def test_step_times_need_two_readings_and_hold_while_the_step_does_not_move() -> None:
    memory, out = step_times({}, [Beat("7", 0, 100, 1_000_000_000)])
    assert out == {}
    memory, out = step_times(memory, [Beat("7", 0, 120, 2_000_000_000)])
    assert out == {("7", 0): 0.05}
    memory, out = step_times(memory, [Beat("7", 0, 120, 2_000_000_000)])
    assert out == {("7", 0): 0.05}  # no new beat: the last value
    memory, out = step_times(memory, [Beat("7", 0, 130, 4_000_000_000)])
    assert out == {("7", 0): 0.2}
    assert step_times(memory, [])[1] == {}  # a rank that stopped beating is dropped


def test_gpu_series_only_for_what_the_gpu_reports() -> None:
    assert gpu_families("n1", []) == []  # no GPU: no series, not zeros
    full = GpuStat(0, "NVIDIA H200", 87.0, 40.0, 60 << 30, 141 << 30, 64.0, 612.5, 0, 1, 79)
    partial = GpuStat(1, "NVIDIA H200", utilization_pct=12.0, temperature_c=41.0)
    got = scrape(gpu_families("n1", [full, partial]))
    g0 = (("gpu", "0"), ("name", "NVIDIA H200"), ("node", "n1"))
    g1 = (("gpu", "1"), ("name", "NVIDIA H200"), ("node", "n1"))
    assert got["hyperscope_gpu_utilization_percent"] == {g0: 87.0, g1: 12.0}
    assert got["hyperscope_gpu_temperature_celsius"] == {g0: 64.0, g1: 41.0}
    assert got["hyperscope_gpu_memory_used_bytes"] == {g0: float(60 << 30)}
    assert got["hyperscope_gpu_ecc_uncorrected_errors_total"] == {g0: 0.0}
    assert got["hyperscope_gpu_xid_errors_total"] == {g0: 1.0}
    assert got["hyperscope_gpu_last_xid"] == {g0: 79.0}
    assert g1 not in got["hyperscope_gpu_power_watts"]


def test_straggler_scores_against_the_median_of_the_other_ranks_and_the_agents_verdict() -> None:
    base = recorded()
    now = base.now_ns
    beats = [
        Beat("7", 0, 50, now - 1_000_000_000, 100_000_000, "workers-1"),
        Beat("7", 1, 50, now - 1_000_000_000, 100_000_000, "workers-2"),
        Beat("7", 2, 40, now - 1_000_000_000, 150_000_000, "workers-3"),
        Beat("8", 0, 9, now - 60_000_000_000, 900_000_000, "workers-1"),  # stale: says nothing now
        Beat("8", 1, 9, now, 100_000_000, "workers-2"),  # alone with a fresh timed beat: no median
        Beat("9", 0, 1, now, 0, "workers-1"),  # no window timed yet
    ]
    log = [
        {"kind": "straggler", "job": "7", "rank": 2, "phase": "decided", "reason": "slow"},
        {"kind": "straggler", "job": "7", "rank": 1, "phase": "decided", "reason": "slow"},
        {"kind": "straggler", "job": "7", "rank": 1, "phase": "recovered", "reason": "back"},
    ]
    snap = dataclasses.replace(base, beats=beats, log=log)
    got = scrape(cluster_families(snap, {}))
    key = lambda rank, node: (  # noqa: E731
        ("cluster", "rs"), ("node", node), ("rank", str(rank)), ("slurm_job", "7")
    )  # fmt: skip
    score = got["hyperscope_job_rank_straggler_score"]
    assert set(score) == {key(0, "workers-1"), key(1, "workers-2"), key(2, "workers-3")}
    assert abs(score[key(2, "workers-3")] - 0.5) < 1e-9  # 150 ms against the others' 100 ms
    assert abs(score[key(0, "workers-1")] - (100 / 125 - 1)) < 1e-9  # median of 100 and 150 ms
    assert got["hyperscope_job_rank_straggler"] == {
        key(0, "workers-1"): 0, key(1, "workers-2"): 0, key(2, "workers-3"): 1
    }  # fmt: skip
