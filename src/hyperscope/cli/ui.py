"""``hyperscope ui``: serve the web UI over a store (parse, call :func:`hyperscope.server.serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from hyperscope.cli._options import HomeOption, err, out
from hyperscope.errors import HyperscopeError
from hyperscope.store.store import default_home


def ui(
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on. 127.0.0.1 (default) is this machine only; any other address "
            "(0.0.0.0: every interface) needs the access token the server prints.",
            metavar="HOST",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.", metavar="P")
    ] = 8321,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser.")] = False,
    query_timeout: Annotated[
        float,
        typer.Option(min=0.001, help="Seconds an analysis may run before it is stopped (504).", metavar="S"),
    ] = 30.0,
    max_rows: Annotated[
        int,
        typer.Option(min=1, help="Rows a table may have before the answer is refused (413).", metavar="N"),
    ] = 100_000,
    certfile: Annotated[
        Path | None,
        typer.Option(
            help="Serve HTTPS with this certificate (PEM), so the token and profiles are encrypted "
            "on the network; with --keyfile. Or put a TLS reverse proxy in front.",
            metavar="PEM",
        ),
    ] = None,
    keyfile: Annotated[
        Path | None, typer.Option(help="The certificate's private key (PEM).", metavar="PEM")
    ] = None,
    home: HomeOption = None,
    open_path: Annotated[str, typer.Option(hidden=True)] = "",
) -> None:
    """Serve the web UI: jobs, each profile's dashboard, filters by node, rank and steps.

    Examples:

      hyperscope ui                      # http://127.0.0.1:8321/ in your browser

      hyperscope ui --host 0.0.0.0 --no-browser    # from other machines, with a token

      hyperscope ui --host 0.0.0.0 --certfile cert.pem --keyfile key.pem   # the same over HTTPS

    Jobs still running show new data on every reload. Stop with Ctrl+C.
    """
    from hyperscope.server import serve

    if (certfile is None) != (keyfile is None):
        err.print(Text("error: ", style="bold red") + Text("--certfile and --keyfile go together"))
        raise typer.Exit(2)
    try:
        serve(
            home if home is not None else default_home(),
            host,
            port,
            not no_browser,
            query_timeout_s=query_timeout,
            max_rows=max_rows,
            announce=_say,
            tls=(certfile, keyfile) if certfile is not None and keyfile is not None else None,
            open_path=open_path,
        )
    except (HyperscopeError, OSError) as exc:
        err.print(Text("error: ", style="bold red") + Text(str(exc)))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


def _say(line: str) -> None:
    out.print(line, soft_wrap=True)  # a token URL stays whole, for copying
    out.file.flush()
