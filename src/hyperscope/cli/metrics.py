"""``hyperscope metrics``: serve Prometheus's /metrics for a cluster and this host's GPUs. Parse,
build the exporter, serve until interrupted."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Annotated

import typer

from hyperscope.cli._options import HomeOption, err, out

DEFAULT_PORT = 9478  # hyperscope.metrics.DEFAULT_PORT (not imported here: --help stays fast)


def metrics_command(
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="The cluster whose nodes, jobs, goodput and agent actions to export "
            "(default: the only cluster under --home, else none: GPU series only).",
            metavar="NAME",
        ),
    ] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to serve /metrics on.")] = DEFAULT_PORT,
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 lets a Prometheus on another host scrape it.")
    ] = "127.0.0.1",
    node: Annotated[
        str | None,
        typer.Option(
            help="The node label of this host's GPU series (default: Slurm's name, else the hostname)."
        ),
    ] = None,
    gpus: Annotated[bool, typer.Option("--gpus/--no-gpus", help="Export this host's GPUs (NVML).")] = True,
    home: HomeOption = None,
) -> None:
    """Serve Prometheus metrics: node health and Slurm state, job step times, goodput and the
    agent's actions of a cluster, and this host's GPU utilization, temperature, memory, ECC and
    XID counts. Run it once with --cluster for the fleet, and on each GPU node for its GPUs."""
    from hyperscope.cluster.manage import load
    from hyperscope.errors import HyperscopeError
    from hyperscope.health import node_name
    from hyperscope.metrics.exporter import Exporter, only_cluster, serve
    from hyperscope.store.store import default_home

    root = home.expanduser() if home is not None else default_home()
    name = cluster if cluster is not None else only_cluster(root)
    if name is not None:
        try:
            load(name, root)
        except HyperscopeError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
    exporter = Exporter(root, name, node=node or node_name(), gpus=gpus)
    try:
        server, _ = serve(exporter, host, port)
    except OSError as exc:
        err.print(f"error: cannot serve on {host}:{port}: {exc.strerror or exc}", markup=False)
        raise typer.Exit(1) from None
    bound = server.server_address[1]
    what = f"cluster {name}" if name else "no cluster (GPU series only"
    if name is None:
        from hyperscope.cluster.state import list_states

        try:
            found = [c.name for c in list_states(root)]
        except HyperscopeError:
            found = []
        what += f"; {len(found)} clusters under {root}: name one with --cluster)" if found else ")"
    out.print(f"serving http://{host}:{bound}/metrics ({what}); Ctrl+C stops", markup=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    exporter.close()
