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
from types import ModuleType
from typing import Any, Final

from hyperscope.capture import api
from hyperscope.capture._imports import when_imported
from hyperscope.capture.config import ENV_AUTOSTART, ProfilerConfig

__all__ = ["ENV_AUTOSTART", "autostart", "is_launcher"]
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
    started = api.start_at_startup(config)
    if started:  # each framework hooked once the script imports it, never imported here
        when_imported("torch.nn.modules.module", _training_from_first_forward)
        when_imported("torch.optim.optimizer", _steps_from_optimizer)
        when_imported("keras", _steps_from_keras)
        when_imported("jax.profiler", _steps_from_jax)
    return started


def _training_from_first_forward(module: ModuleType) -> None:
    """Start-up ends at the first forward of any ``nn.Module`` (a global pre-hook, removed then).

    Without it the first step would run from interpreter start: imports, data and model building
    counted as step 0. Where it is missing, the first annotation, optimizer step or ``step()``
    ends start-up.
    """
    handles: list[Any] = []

    def first_forward(mod: Any, args: Any) -> None:
        while handles:
            handles.pop().remove()  # _call_impl iterates over a copy of the hooks: safe here
        api.training_begins()

    handles.append(module.register_module_forward_pre_hook(first_forward))


def _steps_from_optimizer(optim: ModuleType) -> None:
    """One step per call of the first optimizer's ``step()``, unless the script calls ``step()``.

    The step is marked after ``step()`` returns, not from an optimizer step hook: PyTorch runs
    those hooks inside the ``Optimizer.step#...`` record_function, and a step may restart Kineto
    (a flush). A record_function opened under one Kineto session and closed under the next writes
    into the freed session's buffers, which crashed a process now and then (SIGSEGV).
    """
    Optimizer = optim.Optimizer
    original = Optimizer.profile_hook_step
    first: list[int] = []
    depth = threading.local()

    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        inner = original(func)

        @functools.wraps(inner)
        def step(*args: Any, **kwargs: Any) -> Any:
            # a subclass's step() calling its parent's: one step, marked when the outer returns
            depth.n = getattr(depth, "n", 0) + 1
            if depth.n == 1:
                api.training_begins()  # a script without nn.Module: training began by now
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

    Optimizer.profile_hook_step = staticmethod(profile_hook_step)


def _steps_from_keras(keras: ModuleType) -> None:
    """Every ``model.fit`` gets a callback: a batch begun starts the training (start-up ends), a
    batch ended ends a step, as the optimizer's ``step()`` does in PyTorch."""

    class HyperscopeSteps(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            api.training_begins()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            api.optimizer_step()

    original = keras.Model.fit

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        callbacks = list(kwargs.get("callbacks") or [])
        if not any(isinstance(c, HyperscopeSteps) for c in callbacks):
            kwargs["callbacks"] = [*callbacks, HyperscopeSteps()]
        return original(self, *args, **kwargs)

    keras.Model.fit = fit


def _steps_from_jax(profiler: ModuleType) -> None:
    """A ``jax.profiler.StepTraceAnnotation`` block is a step: entered, the training has begun;
    left, the step ends (JAX's own way of saying where the steps of a jitted loop are)."""
    cls = profiler.StepTraceAnnotation
    enter, exit_ = cls.__enter__, cls.__exit__

    def __enter__(self: Any) -> Any:
        api.training_begins()
        return enter(self)

    def __exit__(self: Any, *exc: Any) -> Any:
        out = exit_(self, *exc)
        api.optimizer_step()
        return out

    cls.__enter__, cls.__exit__ = __enter__, __exit__
