"""Results derived from a finished profile and kept beside it, in ``<profile>/derived/``.

A finished profile never changes, so what is slow to compute from it (the whole dashboard, the
timeline's index) is computed once and read back by any later process. Each result is named by a
digest of the source of the code that computed it: a hyperscope whose code changed never reads
an older one's results, it computes and keeps its own. Removing a job removes them with it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Final

DERIVED_DIR: Final = "derived"


@functools.cache
def source_digest(package: Path) -> str:
    """A digest of every module of ``package`` (a directory): what a derived result depends on."""
    digest = hashlib.sha256()
    for source in sorted(package.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]
