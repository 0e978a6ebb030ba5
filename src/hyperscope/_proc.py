"""Process liveness, kept free of heavy imports: the store's staging cleanup and the health loop
that Slurm starts on every node both ask it."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (another user's process counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
