"""What an import runs beside its own work: started with the import, handed the rows once they are
all in memory, and done before the profile is published.

``hyperscope import`` computes the dashboard there (``analysis.stored.precompute_beside``). It
starts with the import, not when the rows are ready, so that what it needs first (a DuckDB
database: 20-40 ms) is made while the files are read; it then waits for the rows, and works while
the Parquet writer keeps the other core busy. The rows are never handed over where they are not
all in memory (written out as parts): it is then told so, and ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

log = logging.getLogger("hyperscope.store")

#: ``beside(rows, profile_dir)``: ``rows()`` waits for the events as they will be stored (in no
#: particular order), or None where the import holds them in parts, or fails; what it writes into
#: ``profile_dir`` is published with the profile. It must not raise (an error is only logged).
Beside = Callable[[Callable[[], pa.Table | None], Path], None]


class BesideRun:
    """One run of a ``Beside`` on a thread of its own, for one import."""

    def __init__(self, beside: Beside, profile_dir: Path) -> None:
        self._rows: pa.Table | None = None
        self._given = threading.Event()
        self._beside = beside

        def run() -> None:
            try:
                beside(self._wait, profile_dir)
            except Exception as exc:  # what runs beside never costs the import its profile
                log.warning("hyperscope: %s beside the import into %s failed: %s", beside, profile_dir, exc)

        self._thread = threading.Thread(target=run, name="hyperscope-beside", daemon=True)
        self._thread.start()

    def _wait(self) -> pa.Table | None:
        self._given.wait()
        return self._rows

    def give(self, rows: pa.Table | None) -> None:
        """Hand the rows over (None: there are none to hand); only the first call counts."""
        if not self._given.is_set():
            self._rows = rows
            self._given.set()

    def finish(self) -> None:
        """Wait for it to end (told there are no rows if none were given)."""
        self.give(None)
        self._thread.join()
        self._rows = None
