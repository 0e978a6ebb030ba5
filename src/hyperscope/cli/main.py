"""The ``hyperscope`` command: parse, call the library, print. No logic of its own."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import duckdb
import typer
import typer.core
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from hyperscope import __version__
from hyperscope.cli._options import HomeOption, err, out
from hyperscope.cli._options import fail as _fail
from hyperscope.cli._options import open_store as _store
from hyperscope.cli._summary import mb, print_summary
from hyperscope.cli.agent import agent_command
from hyperscope.cli.capture import capture_command
from hyperscope.cli.cluster import cluster_app, submit
from hyperscope.cli.demo import demo
from hyperscope.cli.diff import diff as diff_command
from hyperscope.cli.health import health_command
from hyperscope.cli.inplace import restart_in_place_command
from hyperscope.cli.metrics import metrics_command
from hyperscope.cli.profile import precompute_for_ui
from hyperscope.cli.profile import profile as profile_command
from hyperscope.cli.report import report as report_command
from hyperscope.cli.ui import ui as ui_command
from hyperscope.errors import HyperscopeError, UsageError
from hyperscope.store.catalog import Job, JobStatus
from hyperscope.store.store import ImportReport, Store
from hyperscope.store.summary import summarize


class _Group(typer.core.TyperGroup):
    """The command list of ``--help`` with each command's first sentence whole, wrapped, not cut
    to the width left beside the names ("for real (PyTorch installed), else...")."""

    # Any: typer 0.2x vendors its own click, whose Context and HelpFormatter are private names
    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    cls=_Group,
    name="hyperscope",
    help=(
        "Profile training on your own GPU machines and explore the results.\n\n"
        "Profiles live in a store directory (--home, else $HYPERSCOPE_HOME, else ~/.hyperscope): "
        "a jobs catalog plus compact Parquet files per profile.\n\n"
        "Start with `hyperscope demo`, or import traces that torch.profiler wrote:\n\n"
        "  hyperscope import ./traces/ --job resnet-run-3\n\n"
        "  hyperscope jobs --search resnet\n\n"
        "  hyperscope ui    (the jobs and their dashboards in a browser)\n\n"
        "  hyperscope export resnet-run-3 --chrome resnet.json.gz"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@contextmanager
def _progress(total: int, label: str, *, bytes_: bool = True) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr, shown only on a terminal and for work that takes a while."""
    show = err.is_terminal and total > (32 << 20 if bytes_ else 500_000)
    columns = (
        (DownloadColumn(), TransferSpeedColumn()) if bytes_ else (MofNCompleteColumn(), TextColumn("events"))
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        TimeRemainingColumn(),
        console=err,
        disable=not show,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _version(value: bool) -> None:
    if value:
        out.print(f"hyperscope {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    pass


@app.command("import")
def import_(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Trace files (.json, .json.gz) written by torch.profiler/Kineto, XPlane files "
            "(.xplane.pb) and trace JSON (.trace.json.gz) written by TensorFlow and JAX, or directories "
            "of them. Several files of one distributed run become one profile, one rank per file.",
            show_default=False,
            metavar="PATH",
        ),
    ],
    job: Annotated[str, typer.Option("--job", "-j", help="Job name; created if new.", metavar="NAME")],
    rank: Annotated[
        int | None,
        typer.Option(
            help="Rank of a single file whose trace and file name do not say (default 0).",
            show_default=False,
            metavar="N",
        ),
    ] = None,
    home: HomeOption = None,
) -> None:
    """Import Kineto / Chrome-trace JSON or XPlane (TF, JAX) into the store as one profile of JOB.

    The rank of each file comes from its distributedInfo, else from its name (rank3, worker3),
    else from --rank. Nothing is stored unless every file imports: a bad file stops the import
    with the file, the event index and the field at fault.
    """
    from hyperscope.analysis.stored import precompute_beside

    with _store(home) as store:
        try:
            total = sum(p.stat().st_size for p in _expand(paths))
        except OSError:
            total = 0
        with _progress(total, f"importing {job}") as advance:
            try:
                # the dashboard computed while the events are written, where they fit in memory
                report = store.import_traces(
                    paths, job, rank=rank, progress=advance, beside=precompute_beside
                )
            except HyperscopeError as exc:
                _fail(f"{exc}\nnothing was imported", 2 if isinstance(exc, UsageError) else 1)
    read = sum(f.events for f in report.files)
    with _store(home) as store:
        try:
            # the dashboard and the timeline index are kept beside the profile: counted in its size
            precompute_for_ui(store.home, report.job.name, report.profile.id)
            profile = store.profile(report.job.name, report.profile.id)
            out.print(
                f"imported {len(report.files)} file(s), {len(report.ranks)} rank(s) into job "
                f"[bold]{report.job.name}[/] (profile {report.profile.id}): "
                f"{read:,} events read, {report.profile.events:,} stored, "
                f"{read - report.profile.events:,} skipped; {mb(report.source_bytes)} of JSON → "
                f"{mb(profile.disk_bytes())} on disk"
            )
            for warning in report.warnings:
                err.print(Text("warning: ", style="bold yellow") + Text(warning))
            print_summary(summarize(profile))
        except (HyperscopeError, duckdb.Error, OSError) as exc:
            if _still_there(store, report):
                raise
            # `hyperscope rm` (an operator's own action) removed it meanwhile: the import did its part
            err.print(
                Text("warning: ", style="bold yellow")
                + Text(
                    f"job {report.job.name!r} was "
                    f"removed while this import finished (profile {report.profile.id}): {exc}"
                )
            )


def _still_there(store: Store, report: ImportReport) -> bool:
    try:
        return any(p.id == report.profile.id for p in store.job(report.job.name).profiles)
    except HyperscopeError:
        return False


def _expand(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(x for x in p.iterdir() if x.is_file()) if p.is_dir() else [p])
    return files


@app.command("jobs")
def jobs(
    search: Annotated[str | None, typer.Option(help="Only jobs whose name contains TEXT.")] = None,
    status: Annotated[
        str | None,
        typer.Option(help="Only jobs in this status: InProgress, Completed, Failed, Stopped, Stopping."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only jobs created on or after DATE (2026-11-30 or 2026-11-30T14:00, UTC)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    home: HomeOption = None,
) -> None:
    """List jobs, newest first."""
    with _store(home) as store:
        try:
            status_value = JobStatus.parse(status) if status else None
            since_ns = _parse_date(since) if since else None
        except HyperscopeError as exc:
            _fail(str(exc), 2)
        found = store.jobs(search=search, status=status_value, since_ns=since_ns)
    if as_json:
        out.print_json(json.dumps([_job_json(j) for j in found]))
        return
    if not found:
        out.print("no jobs match" if (search or status or since) else "no jobs yet: try `hyperscope demo`")
        return
    table = Table("id", "name", "created (UTC)", "status", "nodes", "ranks", "profiles", "events")
    for j in found:
        table.add_row(
            str(j.id),
            j.name,
            _when(j.created_ns),
            j.status.value,
            ", ".join(j.nodes) or "-",
            str(j.ranks),
            str(len(j.profiles)),
            f"{sum(p.events for p in j.profiles):,}",
        )
    out.print(table)


@app.command("show")
def show(
    job: Annotated[str, typer.Argument(help="Job name or id.", metavar="JOB")],
    home: HomeOption = None,
) -> None:
    """Summarize a job's newest profile: ranks, event kinds, top kernels."""
    with _store(home) as store:
        try:
            profile = store.profile(job)
        except HyperscopeError as exc:
            _fail(str(exc))
        print_summary(summarize(profile))


@app.command("export")
def export(
    job: Annotated[str, typer.Argument(help="Job name or id.", metavar="JOB")],
    chrome: Annotated[
        Path,
        typer.Option(
            help="Output NAME.json or NAME.json.gz (several ranks: NAME.rankN.json[.gz] each), "
            "loadable by Perfetto, chrome://tracing and HTA.",
            metavar="OUT",
        ),
    ],
    rank: Annotated[
        int | None, typer.Option(help="Export only this rank.", show_default=False, metavar="N")
    ] = None,
    home: HomeOption = None,
) -> None:
    """Export a job's profile to Chrome-trace JSON, so other tools can open it."""
    with _store(home) as store:
        try:
            events = store.profile(job).meta.events
            with _progress(events, f"exporting {job}", bytes_=False) as advance:
                written = store.export_chrome(job, chrome, rank=rank, progress=advance)
        except HyperscopeError as exc:
            _fail(str(exc), 2 if isinstance(exc, UsageError) else 1)
    for path in written:
        out.print(f"wrote {path} ({mb(path.stat().st_size)})")


@app.command("rm")
def rm(
    job: Annotated[str, typer.Argument(help="Job name or id.", metavar="JOB")],
    home: HomeOption = None,
) -> None:
    """Delete a job and its profiles from the store."""
    with _store(home) as store:
        try:
            removed = store.remove(job)
        except HyperscopeError as exc:
            _fail(str(exc))
    out.print(f"removed job {removed.name} and {len(removed.profiles)} profile(s)")


app.command("demo")(demo)
app.command("profile")(profile_command)
app.command("capture")(capture_command)
app.command("report")(report_command)
app.command("diff")(diff_command)
app.command("ui")(ui_command)
app.command("health")(health_command)
app.command("agent")(agent_command)
app.command("restart-in-place")(restart_in_place_command)
app.command("metrics")(metrics_command)
app.add_typer(cluster_app, name="cluster")
app.command("submit")(submit)


def _job_json(job: Job) -> dict[str, object]:
    return {
        "id": job.id,
        "name": job.name,
        "created": _when(job.created_ns),
        "created_ns": job.created_ns,
        "status": job.status.value,
        "nodes": job.nodes,
        "ranks": job.ranks,
        "profiles": [
            {"id": p.id, "events": p.events, "ranks": p.ranks, "bytes": p.bytes, "source": p.source}
            for p in job.profiles
        ],
    }


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _parse_date(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: expected a date like 2026-11-30 or 2026-11-30T14:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return min(int(moment.timestamp() * 1e9), 2**63 - 1)  # nanoseconds past 2262 do not fit


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted; nothing half-written was kept")
        sys.exit(130)
