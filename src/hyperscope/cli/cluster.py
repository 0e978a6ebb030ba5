"""``hyperscope cluster …``: create, list, describe, list-nodes, delete. Parse, call
:mod:`hyperscope.cluster.manage`, print; the clusters live under the store home
(``$HYPERSCOPE_HOME/clusters/NAME``), so ``--home`` means the same as for profiles.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.table import Column, Table
from rich.text import Text

from hyperscope.cli._options import HomeOption, err, out
from hyperscope.cluster import jobs, manage
from hyperscope.cluster.state import Progress
from hyperscope.errors import HyperscopeError, UsageError
from hyperscope.store.catalog import JobStatus
from hyperscope.store.store import default_home

cluster_app = typer.Typer(
    name="cluster",
    help=(
        "Slurm clusters from a spec of instance groups and lifecycle scripts (like SageMaker HyperPod).\n\n"
        "  hyperscope cluster create -f examples/cluster.yaml\n\n"
        "  hyperscope cluster list-nodes demo\n\n"
        "  hyperscope cluster delete demo"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

NameArg = Annotated[str, typer.Argument(help="The cluster's name (from its spec).", metavar="NAME")]


def _fail(exc: HyperscopeError) -> NoReturn:
    err.print(Text("error: ", style="bold red") + Text(str(exc)))
    raise typer.Exit(2 if isinstance(exc, UsageError) else 1)


def _home(home: Path | None) -> Path:
    return home.expanduser() if home is not None else default_home()


def _progress(t0: float) -> Progress:
    """A long command's steps on stderr, each with the seconds since ``t0`` and its node."""

    def say(node: str, step: str) -> None:
        err.print(Text(f"{time.monotonic() - t0:6.2f}s  {node:<16} {step}", style="dim"))

    return say


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


@cluster_app.command("create")
def create(
    file: Annotated[Path, typer.Option("-f", "--file", help="The cluster spec (YAML).", metavar="FILE")],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Tear down a cluster of the same name that still runs (stopping its running jobs, "
            "which it lists) and create it anew.",
        ),
    ] = False,
    home: HomeOption = None,
) -> None:
    """Bring a cluster up from its spec; running it again on a cluster in service changes nothing;
    a cluster of that name that is half running, or has another spec, is refused unless --replace."""
    t0 = time.monotonic()
    progress = _progress(t0)

    try:
        state = manage.create(file, _home(home), progress, replace=replace)
    except HyperscopeError as exc:
        _fail(exc)
    out.print(
        f"cluster [bold]{state.name}[/] is {state.status} "
        f"({len(state.nodes)} nodes, {time.monotonic() - t0:.1f} s)\n"
        f"export SLURM_CONF={state.slurm_conf}"
    )


DrainTimeout = Annotated[
    float,
    typer.Option(
        "--drain-timeout", min=1, metavar="SECONDS",
        help="How long to wait for the jobs on a node that is drained (to be removed or updated) "
        "to end; past it the update stops and says which jobs hold it.",
    ),
]  # fmt: skip


@cluster_app.command("update")
def update(
    file: Annotated[
        Path, typer.Option("-f", "--file", help="The edited cluster spec (YAML).", metavar="FILE")
    ],
    drain_timeout: DrainTimeout = 3600.0,
    home: HomeOption = None,
) -> None:
    """Change a live cluster to its edited spec without stopping running jobs: more or fewer
    nodes in a group (spares join the partition first), new or removed worker and login groups.
    Nodes that go are drained and their jobs finish first. The controller, Slurm's settings, a
    group's GPUs and the shared folder cannot change in place (delete and create instead).
    Local and ssh providers (ssh: new nodes on hosts the group lists that no node uses); an
    adopted cluster's nodes are its operator's, so it refuses there. The agent keeps recovering
    the nodes the update is not acting on."""
    t0 = time.monotonic()
    progress = _progress(t0)

    try:
        plan = manage.update(file, _home(home), progress, drain_timeout_s=drain_timeout)
    except HyperscopeError as exc:
        _fail(exc)
    out.print(f"{plan.describe()} ({time.monotonic() - t0:.1f} s)")


@cluster_app.command("update-software")
def update_software(
    name: NameArg,
    batch: Annotated[
        int, typer.Option("--batch", min=1, metavar="N", help="Slurm nodes drained and updated at a time.")
    ] = 1,
    drain_timeout: DrainTimeout = 3600.0,
    home: HomeOption = None,
) -> None:
    """Run the lifecycle script's update step on every node: on_update.sh where the lifecycle
    folder has one, else on_create.sh again with HYPERSCOPE_UPDATE=1. Login and controller nodes
    first, then Slurm nodes BATCH at a time: drained (their jobs finish), updated, slurmd
    restarted, resumed. A failed node stays drained with the reason "Software update failed"
    and the update stops. ssh: the spec's lifecycle folder is copied to every host first and the
    step runs over ssh. existing: the spec's recovery.update_command is run for each drained
    node instead. The agent keeps recovering the nodes outside the batch."""
    t0 = time.monotonic()
    progress = _progress(t0)

    try:
        done = manage.update_software(name, _home(home), progress, batch=batch, drain_timeout_s=drain_timeout)
    except HyperscopeError as exc:
        _fail(exc)
    out.print(f"updated {len(done)} node(s) of {name} ({time.monotonic() - t0:.1f} s)")


@cluster_app.command("list")
def list_(home: HomeOption = None) -> None:
    """Every cluster this store knows, with its status."""
    try:
        states = manage.list_clusters(_home(home))
    except HyperscopeError as exc:
        _fail(exc)
    if not states:
        out.print("no clusters; create one with `hyperscope cluster create -f cluster.yaml`")
        return
    table = Table("name", "provider", "status", "nodes", "controller", "created")
    for s in states:
        table.add_row(s.name, s.provider, s.status, str(len(s.nodes)), s.controller, _when(s.created))
    out.print(table)


@cluster_app.command("describe")
def describe(name: NameArg, home: HomeOption = None) -> None:
    """Status, groups, controller, Slurm version and the path of slurm.conf."""
    try:
        d = manage.describe(name, _home(home))
    except HyperscopeError as exc:
        _fail(exc)
    s = d.state
    facts = Table.grid(padding=(0, 2))
    for key, value in (
        ("name", s.name),
        ("status", s.status),
        ("provider", s.provider),
        ("controller", s.controller),
        ("partition", s.partition),
        ("slurm version", d.slurm_version or "(not answering)"),
        ("slurm.conf", s.slurm_conf),
        ("shared dir", s.shared_dir),
        ("spec", s.spec_path),
        (
            "daemons",
            ("the user's (adopted)" if s.provider == "existing" else f"{len(s.procs)}")
            + (" (running)" if d.running else " (not running)"),
        ),
        ("created", _when(s.created)),
    ):
        facts.add_row(Text(key, style="bold"), Text(value))
    out.print(facts)
    if s.error:
        out.print(Text("error: ", style="bold red") + Text(s.error))
    for note in s.notes:
        out.print(Text("note: ", style="bold yellow") + Text(note))
    groups = Table("group", "role", "nodes", "spares")
    for g, role, count, spares in d.groups:
        groups.add_row(g, role, str(count), str(spares))
    out.print(groups)
    if d.jobs_note:
        err.print(Text("warning: ", style="bold yellow") + Text(d.jobs_note))
    if d.jobs:
        out.print(f"jobs in {jobs.store_home(s)} (the last 10; `hyperscope jobs --home` lists all):")
        recent = Table("job", "status", "created", "slurm")
        for j in d.jobs[-10:]:
            recent.add_row(j.name, j.status.value, _when(j.created_ns / 1e9), j.message)
        out.print(recent)


@cluster_app.command("list-nodes")
def list_nodes(name: NameArg, home: HomeOption = None) -> None:
    """Every node: group, our status, Slurm's state, health, since when, replacements, the agent's
    last action, and (while the agent finds one) the straggler rank on it with its step times."""
    try:
        rows = manage.list_nodes(name, _home(home))
    except HyperscopeError as exc:
        _fail(exc)
    table = Table("group", "role", "status", "slurm state", "health", "since", "replacements", "last action")
    table.columns.insert(0, Column("node", no_wrap=True))
    slow = any(r.straggler for r in rows)
    if slow:  # the column only while the agent finds one
        table.add_column("straggler")
    for r in rows:
        role = f"{r.role} (spare)" if r.spare else r.role
        style = "red" if r.health.startswith("unhealthy") or r.status == "Failed" else None
        cells = [r.node, r.group, role, r.status, r.slurm_state, r.health, r.since, str(r.replacements)]
        table.add_row(*cells, r.last_action, *([r.straggler] if slow else []), style=style)
    out.print(table)


NodeArg = Annotated[str, typer.Argument(help="The node (as list-nodes names it).", metavar="NODE")]


NowOption = Annotated[
    bool,
    typer.Option(
        "--now",
        help="Act at once: the node is set DOWN and its running jobs are requeued now "
        "(default: the node takes no new job and the agent acts when its jobs end).",
    ),
]


def _mark(name: str, node: str, action: str, home: Path | None, now: bool) -> None:
    try:
        running = manage.jobs_on(name, _home(home), node)
        command = manage.mark_node(name, _home(home), node, action, now=now)
    except HyperscopeError as exc:
        _fail(exc)
    ids = ", ".join(map(str, running))
    if not running:
        when = "now (no job runs on it)"
    elif now:
        when = f"now; its running job(s) {ids} are requeued"
    else:
        when = f"once its running job(s) {ids} end (--now: at once, requeuing them)"
    out.print(
        f"{command}\nthe recovery agent will {action} {node} {when}; "
        f"`hyperscope cluster list-nodes {name}` shows it",
        markup=False,
    )


@cluster_app.command("replace-node")
def replace_node(name: NameArg, node: NodeArg, now: NowOption = False, home: HomeOption = None) -> None:
    """Mark a node for replacement (Slurm reason Action:Replace); the agent replaces it when its
    jobs end, or at once with --now."""
    _mark(name, node, "replace", home, now)


@cluster_app.command("reboot-node")
def reboot_node(name: NameArg, node: NodeArg, now: NowOption = False, home: HomeOption = None) -> None:
    """Mark a node for a reboot (Slurm reason Action:Reboot); the agent reboots it when its jobs
    end, or at once with --now."""
    _mark(name, node, "reboot", home, now)


@cluster_app.command("delete")
def delete(name: NameArg, home: HomeOption = None) -> None:
    """Stop every daemon the cluster runs, by process id, and remove its state (not the shared dir)."""
    try:
        existed = manage.delete(name, _home(home))
    except HyperscopeError as exc:
        _fail(exc)
    out.print(f"deleted cluster {name}" if existed else f"no cluster named {name}; nothing to do")


@cluster_app.command("shell")
def shell(
    name: NameArg,
    node: Annotated[
        str | None,
        typer.Option("--node", help="Node to 'log in' to (default: the login node).", metavar="NODE"),
    ] = None,
    command: Annotated[
        str | None, typer.Option("-c", "--command", help="Run this command instead of an interactive shell.")
    ] = None,
    home: HomeOption = None,
) -> None:
    """A shell with the cluster's environment (SLURM_CONF, the node's facts), in the shared directory."""
    try:
        env, cwd = manage.shell_env(name, _home(home), node)
    except HyperscopeError as exc:
        _fail(exc)
    sh = env.get("SHELL", "/bin/bash")
    if command is None:
        err.print(
            f"{env['HYPERSCOPE_NODE']} of cluster {name}: SLURM_CONF={env['SLURM_CONF']}; exit to leave"
        )
    os.chdir(cwd)
    os.execvpe(sh, [sh] if command is None else [sh, "-c", command], env)


@cluster_app.command("submit")
def submit(
    name: NameArg,
    sbatch_args: Annotated[
        list[str],
        typer.Argument(help="sbatch's arguments and the script, after --.", metavar="-- SBATCH-ARGS"),
    ],
    home: HomeOption = None,
) -> None:
    """Submit a batch job: ``hyperscope submit demo -- -N2 job.sh``. It runs with HYPERSCOPE_HOME
    on the cluster's shared store and HYPERSCOPE_JOB on its catalog entry, so its profiles join it."""
    try:
        done = manage.submit(name, _home(home), sbatch_args)
    except HyperscopeError as exc:
        _fail(exc)
    out.print(
        f"submitted job {done.job_id} to cluster {name}\n"
        f"catalog job: {done.catalog_job} (hyperscope jobs --home {done.store})\n"
        f"output: {done.output or '(as sbatch decides)'}\n"
        f"profiles: {done.store}\n"
        f"status: {done.status.value}"
    )
    if done.status is JobStatus.FAILED:  # only known this soon with --wait
        raise typer.Exit(1)


@cluster_app.command("hooks")
def hooks_cmd(name: NameArg, home: HomeOption = None) -> None:
    """An adopted (existing) cluster: write the TaskProlog (heartbeats for hang detection, a
    checkpoint folder per job) and --auto-resume's plugin to the shared directory, and print the
    slurm.conf lines that use them, for its operator to add. Nothing of the cluster is changed."""
    from hyperscope.cluster import adopted_hooks

    try:
        done = adopted_hooks.write(manage.load(name, _home(home)))
    except HyperscopeError as exc:
        _fail(exc)
    out.print(f"# wrote {done.folder}; add to slurm.conf on every node, then `scontrol reconfigure`:")
    for line in done.lines:
        out.print(line, soft_wrap=True)
    out.print(
        "# a TaskProlog of your own instead: run the one above from it and print what it prints",
        soft_wrap=True,
    )
    if done.plugstack:
        out.print(f"# a plugstack.conf of your own instead: add to it\n# {done.plugstack}", soft_wrap=True)
    out.print(
        "# the Prolog check: add `hyperscope health --quick --drain` to your Prolog (its node: "
        "$SLURMD_NODENAME)",
        soft_wrap=True,
    )
    for note in done.notes:
        err.print(Text("note: ", style="bold yellow") + Text(note))
