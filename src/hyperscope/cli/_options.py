"""Options every command that touches the store takes, and the consoles every command prints to."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
