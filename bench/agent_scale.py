"""The recovery agent's loop at 1,000 nodes: its CPU per pass and how soon it acts on a dead node.

Slurm is not run at this size here (a 2-core machine): the agent's loop (:class:`Agent`, as
``hyperscope agent`` runs it) is fed **recorded real** ``scontrol show node -o`` and
``scontrol show job -o`` output of a local cluster (tests/data/cluster_slurm_outputs/agent_*.txt,
recorded with a 2-node job running, then with one node's slurmd killed), scaled up: every node line
copied under a new name and port, one 2-rank job per two nodes, each rank beating into the
heartbeat folder (N heartbeat files). The provider's side is a stand-in that only records what it
is asked (the fence, the spare swap, the re-create), so what is measured is the agent's own work:

* **CPU per pass** (``time.process_time``, 30 steady passes, nothing to act on), the agent as it
  is, against the pass it replaced, in the same run: every node line parsed and every heartbeat
  file read, every second;
* **a dead node acted on**: from the moment the output starts showing one node DOWN and not
  responding (the recorded not-responding line as Slurm shows it SlurmdTimeout later: state
  ``DOWN+NOT_RESPONDING``, ``Reason=Not responding``) to the agent's fence of it
  (``scontrol update nodename=… state=down``), the loop running at its 1 s interval on a
  thread. (On a real cluster Slurm first needs its SlurmdTimeout; this is what the agent adds.)

Both for the remote providers (ssh, existing: the node's slurmd is Slurm's to watch) and the
local one (a /proc look at each node's slurmd every pass, as ``nodeops.slurmd_alive`` does).
Targets (issue 14): one pass <= 1 s of CPU, the dead node acted on <= 5 s.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from _common import REPO_ROOT, print_table, write_results

from hyperscope.cluster.operate import Outcome
from hyperscope.cluster.slurm import Slurm, parse_show_node
from hyperscope.cluster.state import ClusterState, NodeState
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import Agent, heartbeat_dir, read_log

DATA = REPO_ROOT / "tests" / "data" / "cluster_slurm_outputs"


def scaled(n: int, spares: int) -> tuple[str, str, str]:
    """(healthy node output, the same with one node dead, job output) for ``n`` nodes."""
    healthy = (DATA / "agent_show_node_healthy.txt").read_text().splitlines()
    dead = (DATA / "agent_show_node_one_dead.txt").read_text().splitlines()
    busy, spare = healthy[0], healthy[3]  # workers-1 runs the job; workers-4 is the spare
    dead_line = next(line for line in dead if "NOT_RESPONDING" in line)
    # as Slurm shows it SlurmdTimeout (5 s) later: DOWN, with its own reason (a NOT_RESPONDING
    # alone is a flicker to the agent for recovery's flicker_s, 30 s)
    dead_line = dead_line.replace("State=IDLE+NOT_RESPONDING", "State=DOWN+NOT_RESPONDING")
    dead_line += " Reason=Not responding [slurm@2026-12-01T09:40:30]"

    def named(line: str, i: int) -> str:
        line = re.sub(r"^NodeName=\S+", f"NodeName=workers-{i}", line)
        return re.sub(r" Port=\d+", f" Port={20000 + i}", line)

    lines = [named(spare if i > n - spares else busy, i) for i in range(1, n + 1)]
    victim = n // 2
    one_dead = [*lines[: victim - 1], named(dead_line, victim), *lines[victim:]]
    job = (DATA / "agent_show_job_running.txt").read_text().splitlines()[0]
    jobs = []
    for k in range(1, (n - spares) // 2 + 1):
        line = re.sub(r"^JobId=\d+", f"JobId={k}", job)
        line = re.sub(r" NodeList=\S+", f" NodeList=workers-[{2 * k - 1}-{2 * k}]", line)
        jobs.append(re.sub(r" NumTasks=\d+", " NumTasks=2", line))
    return "\n".join(lines) + "\n", "\n".join(one_dead) + "\n", "\n".join(jobs) + "\n"


class Recorded:
    """Slurm's commands answered from the scaled recordings; what the agent asks is kept."""

    def __init__(self, nodes: str, jobs: str) -> None:
        self.nodes, self.jobs = nodes, jobs
        self.fenced: dict[str, float] = {}

    def __call__(
        self, argv: Sequence[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        out = ""
        if list(argv[:3]) == ["scontrol", "show", "node"]:
            out = self.nodes
        elif list(argv[:3]) == ["scontrol", "show", "job"]:
            out = self.jobs
        elif "state=down" in argv:
            self.fenced.setdefault(argv[2].split("=", 1)[1], time.time())
        return subprocess.CompletedProcess(list(argv), 0, out, "")


class StandIn:
    """The provider's side: Slurm from the recordings, node work only recorded."""

    def __init__(self, slurm: Slurm, local: bool, recorded: Recorded, healthy: str) -> None:
        self._slurm, self.local = slurm, local
        self.recorded, self.healthy = recorded, healthy
        self.recreated: list[str] = []

    def slurm(self) -> Slurm:
        return self._slurm

    def daemon_alive(self, node: NodeState) -> bool:
        if self.local:  # what nodeops.slurmd_alive costs: one /proc/PID/stat read per node
            Path("/proc/self/stat").read_text()
        return True

    def reboot(self, node: NodeState, reason: str) -> Outcome:
        return Outcome()

    def recreate(self, node: NodeState, reason: str) -> Outcome:
        self.recreated.append(node.name)
        self.recorded.nodes = self.healthy  # the node is back (as Slurm would show it)
        return Outcome()


def _cluster(home: Path, n: int, spares: int) -> ClusterState:
    d = home / "clusters" / "sim"
    d.mkdir(parents=True)
    state = ClusterState(
        name="sim", provider="ssh", status="InService", dir=str(d), spec_path="", spec_digest="",
        slurm_conf="/nonexistent/slurm.conf", shared_dir=str(home / "shared"), controller="controller-1",
        partition="dev", ctld_port=6817,
    )  # fmt: skip
    state.nodes = [NodeState(f"workers-{i}", "workers", "worker", i > n - spares, True, "Running")
                   for i in range(1, n + 1)]  # fmt: skip
    state.save()
    return state


def one(n: int, local: bool, passes: int) -> dict[str, Any]:
    spares = max(1, n // 100)
    healthy, one_dead, jobs = scaled(n, spares)
    with TemporaryDirectory(prefix="hs-agent-scale-") as tmp:
        home = Path(tmp)
        state = _cluster(home, n, spares)
        for k in range(1, (n - spares) // 2 + 1):
            for rank in (0, 1):
                heartbeat.Heartbeat(heartbeat_dir(state), str(k), rank).beat(force=True)
        files = len(list(heartbeat_dir(state).iterdir()))
        recorded = Recorded(healthy, jobs)
        ops = StandIn(Slurm(Path(state.slurm_conf), runner=recorded), local, recorded, healthy)
        agent = Agent(home, "sim", operator=ops)
        agent.tick()  # the first pass reads every job's heartbeats once
        t0 = time.process_time()
        for _ in range(passes):
            assert agent.tick() == []
        per_pass = (time.process_time() - t0) / passes
        # the pass it replaced: every node line parsed, every heartbeat file read, every second
        t0 = time.process_time()
        for _ in range(passes):
            parse_show_node(healthy)
            heartbeat.read(heartbeat_dir(state))
            if local:
                for _node in state.nodes:
                    Path("/proc/self/stat").read_text()
        before = (time.process_time() - t0) / passes
        loop = threading.Thread(target=agent.run, kwargs={"interval": 1.0, "passes": 12}, daemon=True)
        loop.start()
        time.sleep(1.37)  # mid-interval: the worst case is just after a pass
        died = time.time()
        recorded.nodes = one_dead
        victim = f"workers-{n // 2}"
        while victim not in recorded.fenced and loop.is_alive():
            time.sleep(0.01)
        acted = recorded.fenced.get(victim, float("nan")) - died
        loop.join(30)
        log = read_log(home / "clusters" / "sim")
    return {
        "nodes": n, "provider": "local" if local else "ssh/existing", "heartbeat_files": files,
        "cpu_per_pass_ms": per_pass * 1e3, "before_cpu_per_pass_ms": before * 1e3,
        "dead_node_acted_on_s": acted, "recreated": ops.recreated, "agent_log": log,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--passes", type=int, default=30)
    args = p.parse_args()
    results = [one(args.nodes, local, args.passes) for local in (False, True)]
    rows = [
        [r["provider"], r["nodes"], r["heartbeat_files"], round(r["cpu_per_pass_ms"], 2),
         round(r["before_cpu_per_pass_ms"], 2), round(r["before_cpu_per_pass_ms"] / r["cpu_per_pass_ms"], 1),
         round(r["dead_node_acted_on_s"], 2)]
        for r in results
    ]  # fmt: skip
    print_table(
        ["provider", "nodes", "heartbeat files", "CPU/pass ms", "before ms", "ratio", "dead node acted on s"],
        rows,
    )
    checks = {
        "one pass <= 1 s of CPU": all(r["cpu_per_pass_ms"] <= 1000 for r in results),
        "a dead node acted on <= 5 s": all(r["dead_node_acted_on_s"] <= 5 for r in results),
        "the dead node re-created": all(r["recreated"] == [f"workers-{args.nodes // 2}"] for r in results),
    }
    for name, ok in checks.items():
        print(f"{'met' if ok else 'MISSED'}: {name}")
    write_results("agent_scale", {"args": vars(args), "runs": results, "targets": checks})


if __name__ == "__main__":
    main()
