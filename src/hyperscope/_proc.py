"""Process liveness and memory, kept free of heavy imports: the store's staging cleanup and the
health loop that Slurm starts on every node ask the first; the server and a capture the second."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (another user's process counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def trim_malloc() -> bool:
    """Hand glibc's free pages back to the system (``malloc_trim(0)``; False where there is none).

    glibc returns only the free memory at the top of an arena by itself, and each thread allocates
    from an arena of its own: what one thread freed stays resident while another allocates anew.
    The server trims once per DuckDB database closed (in bench/soak.py the arenas' free bytes rose
    from 4 to 11 MB over 3 minutes of renewals without it); a capture trims when TensorFlow's or
    JAX's profiler has handed over a window, whose trace buffers (600 MB for 1000 JAX steps of
    XLA ops) stayed resident below the decoding of that window on the writer thread. A trim walks
    the arenas: about a millisecond, more when much is handed back.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
