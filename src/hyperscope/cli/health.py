"""`hyperscope health`: this node's checks, as a table, JSON, or Slurm's HealthCheckProgram."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hyperscope.cli._options import err, out


def health_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    expect_gpus: Annotated[
        int | None, typer.Option(min=0, help="GPUs this node must have (default: whatever NVML finds).")
    ] = None,
    path: Annotated[
        list[Path] | None,
        typer.Option(
            "--path", help="A directory that needs free space and must be writable (repeat).", metavar="DIR"
        ),
    ] = None,
    min_free_gib: Annotated[float, typer.Option(min=0, help="Free space each --path needs, GiB.")] = 1.0,
    shared: Annotated[
        Path | None,
        typer.Option(help="The cluster's shared directory: must be there and writable.", metavar="DIR"),
    ] = None,
    checks_dir: Annotated[
        Path | None,
        typer.Option(
            help="Your own checks: every executable in DIR runs (exit 0 pass, "
            "1 warn, else fail; first output line is the reason).",
            metavar="DIR",
        ),
    ] = None,
    drain: Annotated[
        bool,
        typer.Option(
            help="On failure, drain this node in Slurm with the reason "
            "'hyperscope: <check>: <detail>' (what HealthCheckProgram runs)."
        ),
    ] = False,
    node: Annotated[
        str | None, typer.Option(help="Node name (default: $SLURMD_NODENAME, else hostname).")
    ] = None,
    dcgm_every: Annotated[
        float,
        typer.Option(
            min=0,
            help="Run DCGM's diagnostic at most once per this many seconds, reporting the last "
            "result in between (0: every run).",
            metavar="SECONDS",
        ),
    ] = 0.0,
    dcgm_record: Annotated[
        Path | None,
        typer.Option(
            help="Where the last DCGM diagnostic is kept (default: in the temp folder).", metavar="FILE"
        ),
    ] = None,
    gpu_devices: Annotated[
        Path,
        typer.Option(help="Where GPU device files are counted when NVML cannot be asked.", metavar="DIR"),
    ] = Path("/dev"),
    system_disks: Annotated[
        bool, typer.Option(help="Check free space on the root, temporary and home file systems.")
    ] = True,
    quick: Annotated[
        bool,
        typer.Option(
            help="Skip the slow checks (DCGM diagnostics, your own checks): what Slurm's Prolog runs "
            "before every job on every node."
        ),
    ] = False,
) -> None:
    """Check this node: GPUs through NVML (count, uncorrectable ECC, pending row remaps and page
    retirements, XIDs, temperature and throttling; without NVML, the GPU device files are counted),
    DCGM diagnostics when dcgmi is installed, free space on the root, temporary and home file
    systems, each --path's space and writability, the shared directory, memory, and your own checks.

    Exit status: 0 when every check passes or warns, 1 when one fails. Set HYPERSCOPE_HEALTH_FAULTS
    to a JSON file to rehearse failures (see docs/resilience.md).
    """
    from hyperscope import health

    config = health.configure(
        expect_gpus=expect_gpus, paths=tuple(path or ()), min_free_gib=min_free_gib, shared=shared,
        checks_dir=checks_dir, quick=quick, dcgm_every_s=dcgm_every, dcgm_record=dcgm_record,
        gpu_devices=gpu_devices, system_disks=system_disks,
    )  # fmt: skip
    try:
        report = health.run(config, node=node)
    except ValueError as exc:  # an unreadable fault file
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
    else:
        table = Table(
            "check", "status", "reason", "action", title=f"health of {report.node}: {report.status}"
        )
        colour = {"pass": "green", "warn": "yellow", "fail": "red"}
        for r in report.results:
            table.add_row(
                r.check,
                f"[{colour[r.status]}]{r.status}[/]",
                r.reason,
                "" if r.action == "none" else r.action,
            )
        out.print(table)
    if drain:
        try:
            command = health.drain(report)
        except RuntimeError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
        if command:
            err.print(f"drained: {command}", markup=False)
    raise typer.Exit(1 if report.status == "fail" else 0)
