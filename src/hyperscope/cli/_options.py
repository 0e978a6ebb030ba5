"""Options every command that touches the store takes, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="Store directory. Default: $HYPERSCOPE_HOME, else ~/.hyperscope.",
        show_default=False,
        metavar="DIR",
    ),
]
