"""Where the store lives: its own module, so that a capture finds its home without importing the
store's readers and importers (and DuckDB with them: tens of MB in the profiled process)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "HYPERSCOPE_HOME"


def default_home() -> Path:
    env = os.environ.get(ENV_HOME)
    return Path(env).expanduser() if env else Path.home() / ".hyperscope"
