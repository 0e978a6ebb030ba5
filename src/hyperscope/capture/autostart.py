"""Profiling an unmodified script: what ``hyperscope profile`` starts in every Python process.

The launcher puts a ``sitecustomize`` on PYTHONPATH that calls ``autostart``. A launcher process
such as torchrun's agent is skipped (its workers are profiled instead), and the first profiled
process turns autostart off for its own children, so helper processes a script spawns are not
counted as ranks. Steps come from the optimizer when the script does not mark them itself.
"""

from __future__ import annotations

import logging
import os
import sys
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
    """One step per call of the first optimizer's ``step()``, unless the script calls ``step()``."""
    try:
        import torch.optim.optimizer as optim
    except Exception:
        return
    first: list[int] = []

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not first:
            first.append(id(optimizer))
        if id(optimizer) == first[0]:
            api.optimizer_step()

    optim.register_optimizer_step_post_hook(hook)
