"""Import of XPlane files (``*.xplane.pb``: TensorFlow, JAX, PyTorch/XLA) beside Kineto JSON.

Each file is one rank (from ``--rank``, else a rank in its name, else 0 for a single file). Its
events are decoded (``capture.xplane``), typed by the importer's SQL exactly as a capture's rows
are, and staged in the importer's table; an error raises before the profile is published, so a
broken file leaves nothing stored, as with JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from hyperscope.capture.torch_backend import typed_rows
from hyperscope.capture.xplane import read_rows
from hyperscope.errors import UsageError
from hyperscope.schema.layout import RankMeta
from hyperscope.store.importer import STAGED_TABLE, FileResult, Importer, rank_from_name

XPLANE_SUFFIX: Final = ".xplane.pb"


def is_xplane(path: Path) -> bool:
    return path.name.endswith(XPLANE_SUFFIX)


def add_xplane_files(
    importer: Importer, paths: Sequence[Path], rank: int | None, *, default_rank: int | None
) -> None:
    """Stage every XPlane file into ``importer``'s table, one rank each."""
    taken = {m.rank: m.source_file for m in importer.result.ranks}
    for path in paths:
        r = rank if rank is not None else rank_from_name(path)
        if r is None:
            r = default_rank
        if r is None:
            raise UsageError(
                f"{path}: cannot tell its rank (no rank in the file name); import it alone with --rank N"
            )
        if r in taken:
            raise UsageError(
                f"{path} and {taken[r]} both hold rank {r}; import them as separate jobs or rename the files"
            )
        taken[r] = str(path)
        node = path.name[: -len(XPLANE_SUFFIX)]  # the profilers name the file after the host
        table = typed_rows(read_rows(path), rank=r, node=node, con=importer.con)
        importer.con.register("xplane_rows", table)
        try:
            importer.con.execute(f"INSERT INTO {STAGED_TABLE} BY NAME SELECT * FROM xplane_rows")
        finally:
            importer.con.unregister("xplane_rows")
        importer.result.ranks.append(
            RankMeta(rank=r, node=node, source_file=str(path), clock="epoch_ns", events=table.num_rows)
        )
        importer.result.files.append(FileResult(path, r, table.num_rows))
