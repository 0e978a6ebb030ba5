"""Profiling an unmodified script: what ``hyperscope profile`` starts in every Python process.

The launcher puts a ``sitecustomize`` on PYTHONPATH that calls ``autostart``. A launcher process
such as torchrun's agent is skipped (its workers are profiled instead), and the first profiled
process turns autostart off for its own children, so helper processes a script spawns are not
counted as ranks. Steps come from the optimizer when the script does not mark them itself.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

from hyperscope.capture import api
from hyperscope.capture.config import ProfilerConfig

ENV_AUTOSTART: Final = "HYPERSCOPE_AUTOSTART"
_LAUNCHER_MODULES: Final = ("torch.distributed.run", "torch.distributed.launch")

log = logging.getLogger("hyperscope.capture")


def is_launcher(argv: list[str]) -> bool:
    """Whether this interpreter runs torchrun (or torch.distributed.launch) rather than training.

    ``argv`` is the interpreter's own command line (``sys.orig_argv``): its options come first,
    then the script, or ``-m`` and a module.
    """
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") in _LAUNCHER_MODULES
        if arg in ("-c", "-") or not arg.startswith("-"):
            return os.path.basename(arg) in ("torchrun", "torchrun.py")
        if arg in ("-W", "-X", "-Q"):  # options that take a value
            next(args, None)
    return False


def autostart() -> bool:
    if os.environ.get(ENV_AUTOSTART) != "1" or is_launcher(list(getattr(sys, "orig_argv", sys.argv))):
        return False
    os.environ[ENV_AUTOSTART] = "0"  # this process is the rank; its children are helpers
    if not logging.getLogger().handlers and not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    config = ProfilerConfig.from_env()
    started = api.start_profiling(config)
    if started:
        _steps_from_optimizer()
    return started


def _steps_from_optimizer() -> None:
    """One step per call of the first optimizer's ``step()``, unless the script calls ``step()``.

    The step is marked after ``step()`` returns, not from an optimizer step hook: PyTorch runs
    those hooks inside the ``Optimizer.step#...`` record_function, and a step may restart Kineto
    (a flush). A record_function opened under one Kineto session and closed under the next writes
    into the freed session's buffers, which crashed a process now and then (SIGSEGV).
    """
    try:
        from torch.optim import Optimizer
    except Exception:
        return
    original = Optimizer.profile_hook_step
    first: list[int] = []
    depth = threading.local()

    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        inner = original(func)

        @functools.wraps(inner)
        def step(*args: Any, **kwargs: Any) -> Any:
            # a subclass's step() calling its parent's: one step, marked when the outer returns
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = inner(*args, **kwargs)
            finally:
                depth.n -= 1
            if depth.n == 0 and args:
                if not first:
                    first.append(id(args[0]))
                if id(args[0]) == first[0]:
                    api.optimizer_step()
            return out

        return step

    Optimizer.profile_hook_step = staticmethod(profile_hook_step)  # type: ignore[method-assign]
