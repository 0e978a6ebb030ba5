"""Options every command that touches the store takes, and the consoles every command prints to."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from hyperscope.errors import HyperscopeError, UsageError

if TYPE_CHECKING:
    from hyperscope.store.store import Store

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="Store directory. Default: $HYPERSCOPE_HOME, else ~/.hyperscope.",
        show_default=False,
        metavar="DIR",
    ),
]


def _width() -> int | None:
    """Rich's width in a terminal; when piped or logged, wide enough that no table is cut to '…'
    (Rich would assume 80 columns: a 15-column table then loses every value)."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200


out = Console(highlight=False, width=_width())
# Errors are never wrapped (paths stay whole for logs and grep) nor read as markup (a file name may
# hold '[').
err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Say what went wrong on stderr, as every command does, and exit with ``code``."""
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


@contextmanager
def open_store(home: Path | None) -> Iterator[Store]:
    """The store, or the reason it cannot be opened (exit 2 for a usage error, else 1)."""
    from hyperscope.store.store import Store  # a command that needs no store does not load DuckDB

    try:
        with Store(home) as store:
            yield store
    except HyperscopeError as exc:
        fail(str(exc), 2 if isinstance(exc, UsageError) else 1)
