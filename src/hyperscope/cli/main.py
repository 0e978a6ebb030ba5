"""The ``hyperscope`` command: parse, call the library, print. No logic of its own."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

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
from hyperscope.cli.agent import agent_command
from hyperscope.cli.capture import capture_command
from hyperscope.cli.cluster import cluster_app, submit
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
from hyperscope.store.summary import Summary, summarize


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


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


@contextmanager
def _store(home: Path | None) -> Iterator[Store]:
    try:
        with Store(home) as store:
            yield store
    except HyperscopeError as exc:
        _fail(str(exc), 2 if isinstance(exc, UsageError) else 1)


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
    with _store(home) as store:
        try:
            total = sum(p.stat().st_size for p in _expand(paths))
        except OSError:
            total = 0
        with _progress(total, f"importing {job}") as advance:
            try:
                report = store.import_traces(paths, job, rank=rank, progress=advance)
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
                f"{read - report.profile.events:,} skipped; {_mb(report.source_bytes)} of JSON → "
                f"{_mb(profile.disk_bytes())} on disk"
            )
            for warning in report.warnings:
                err.print(Text("warning: ", style="bold yellow") + Text(warning))
            _print_summary(summarize(profile))
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
        _print_summary(summarize(profile))


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
        out.print(f"wrote {path} ({_mb(path.stat().st_size)})")


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


@app.command("demo")
def demo(
    ranks: Annotated[int, typer.Option(min=1, max=64, help="Ranks of the generated sample.")] = 4,
    steps: Annotated[
        int, typer.Option(min=1, max=1000, help="Training steps (of the example, or per sample rank).")
    ] = 6,
    job: Annotated[str, typer.Option(help="Job name (made unique: demo, demo-2, ...).")] = "demo",
    synthetic: Annotated[
        bool,
        typer.Option(
            "--synthetic",
            help="Import a generated multi-rank sample instead of profiling the example "
            "(what happens anyway where PyTorch is not installed).",
        ),
    ] = False,
    serve_ui: Annotated[
        bool, typer.Option("--serve/--no-serve", help="Serve the web UI on the store afterwards.")
    ] = True,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the UI; 0 picks a free one.")] = 8321,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser.")] = False,
    home: HomeOption = None,
) -> None:
    """Profile a small transformer for real (PyTorch installed), else import a generated sample
    multi-rank trace; print its summary, then serve the web UI on it (stop with Ctrl+C)."""
    with _store(home) as store:
        name, home_dir = _demo_name(store, job), store.home
    example = None if synthetic else _demo_example()
    profiled = None
    if example is not None:
        out.print(f"profiling {example.name} ({steps} steps, tiny sizes) as job [bold]{name}[/] ...")
        profiled, problem = _demo_profile(example, name, home_dir, steps)
        if problem:
            err.print(Text(f"the example could not be profiled ({problem}); using a generated sample"))
    if profiled is None:
        if example is not None:  # the failed run may have left its job: the sample gets its own
            with _store(home_dir) as store:
                name = _demo_name(store, job)
        try:
            report = _demo_sample(home_dir, name, ranks, steps)
        except HyperscopeError as exc:
            _fail(str(exc))
        out.print(
            f"imported as job [bold]{report.job.name}[/]: {report.profile.events:,} events, "
            f"{_mb(report.source_bytes)} of JSON → {_mb(report.profile.bytes)} in {home_dir}"
        )
    else:
        out.print(f"profiled as job [bold]{name}[/]: {profiled:,} events in {home_dir}")
    with _store(home_dir) as store:
        profile = store.profile(name)
        _print_summary(summarize(profile))
    precompute_for_ui(home_dir, name, profile.meta.profile_id)
    out.print(
        f"\nnext: `hyperscope report {name}`, `hyperscope jobs`, "
        f"`hyperscope export {name} --chrome {name}.json.gz`, `hyperscope ui`"
    )
    if not serve_ui:
        return
    ui_command(port=port, no_browser=no_browser, home=home_dir)


#: the example `hyperscope demo` profiles; present in a clone of the repository, not in a wheel
_DEMO_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_transformer.py"


def _demo_name(store: Store, job: str) -> str:
    """``job``, else ``job-2``, ``job-3``, ...: a demo never adds to an earlier job."""
    existing = {j.name for j in store.jobs()}
    name, n = job, 1
    while name in existing:
        n += 1
        name = f"{job}-{n}"
    return name


def _demo_example() -> Path | None:
    """The example script when it and PyTorch are both here; finding torch does not import it."""
    import importlib.util

    if not _DEMO_EXAMPLE.is_file() or importlib.util.find_spec("torch") is None:
        return None
    return _DEMO_EXAMPLE


def _demo_profile(example: Path, job: str, home: Path, steps: int) -> tuple[int | None, str]:
    """Run the example under the launcher, as `hyperscope profile` would: (events, problem)."""
    from hyperscope.capture.config import ProfilerConfig
    from hyperscope.capture.launcher import run

    command = [sys.executable, str(example), "--tiny", "--steps", str(steps), "--no-profile", "--cpu-ops"]
    # every operator recorded: on a CPU-only machine they are the timeline; tiny sizes keep it short
    config = ProfilerConfig(job=job, home=home, cpu_ops=True, sample_interval_s=0.1, flush_min_gap_s=0.2)
    try:
        result = run(command, config)
    except HyperscopeError as exc:
        return None, str(exc)
    if result.returncode != 0 or result.job is None or result.problem:
        return None, result.problem or f"the example exited with code {result.returncode}"
    ref = next((p for p in result.job.profiles if p.id == result.profile_id), None)
    return (ref.events if ref else 0), ""


def _demo_sample(home: Path, job: str, ranks: int, steps: int) -> ImportReport:
    """A generated multi-rank trace (NCCL, copies, steps), imported like a user's traces."""
    from hyperscope.store.synth import SynthSpec, write_job

    with Store(home) as store, tempfile.TemporaryDirectory(prefix="hyperscope-demo-") as tmp:
        paths = write_job(Path(tmp), SynthSpec(ranks=ranks, steps=steps))
        out.print(f"generated a sample {ranks}-rank trace of {steps} steps in {tmp}")
        return store.import_traces(paths, job)


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


def _print_summary(summary: Summary) -> None:
    table = Table("rank", "node", "events", "span (ms)", "kernels", "kernel time (ms)", "steps")
    for r in summary.ranks:
        table.add_row(
            str(r.rank),
            r.node or "-",
            f"{r.events:,}",
            f"{r.span_ns / 1e6:,.3f}",
            f"{r.kernels:,}",
            f"{r.kernel_ns / 1e6:,.3f}",
            str(r.steps),
        )
    out.print(table)
    out.print("events by kind: " + ", ".join(f"{k} {v:,}" for k, v in summary.kinds.items()))
    if summary.samples:
        out.print(
            "system samples (mean): "
            + ", ".join(f"{m} {_mean(m, v)}" for m, (_, v) in summary.samples.items())
        )
    for note in summary.notes:
        out.print(Text(f"note: {note}", style="yellow"))
    if summary.top_kernels:
        kt = Table("top kernels by time", "launches", "total (ms)")
        for name, count, dur in summary.top_kernels:
            kt.add_row(name if len(name) < 90 else name[:87] + "...", f"{count:,}", f"{dur / 1e6:,.3f}")
        out.print(kt)


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


def _mean(metric: str, value: float) -> str:
    if metric.endswith("_bytes"):
        return _mb(int(value))
    return f"{value:,.1f}{'%' if metric.endswith('_pct') else ''}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} KB"


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted; nothing half-written was kept")
        sys.exit(130)
