"""TensorFlow's and JAX's profilers, switched on and off around windows of steps like Kineto.

Both write an XSpace (``*.xplane.pb``) into a log directory when stopped; hyperscope gives each
window a temporary directory, reads the file back (``xplane``) into raw rows and removes it. What
is recorded follows the config as PyTorch's path does: host ops (TF ops, XLA's runtime) when
``cpu_ops`` asks for them, the device (kernels, copies, through CUPTI on NVIDIA GPUs) when
``device`` does, Python functions only with ``python_stacks``. The steps and annotations are
hyperscope's own marks, the same for every framework.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from hyperscope._proc import trim_malloc
from hyperscope.capture import xplane
from hyperscope.capture.torch_backend import RAW_SCHEMA

FRAMEWORKS: Final = ("tensorflow", "jax")


def framework_in_use() -> str | None:
    """The framework whose profiler records this process: torch when imported, else TF, else JAX
    (never imported here: only what the script imported itself counts)."""
    if "torch" in sys.modules:
        return "torch"
    for name in FRAMEWORKS:
        if name in sys.modules:
            return name
    return None


def _module(name: str) -> Any:
    """A framework module, untyped (neither ships type information that mypy reads)."""
    return importlib.import_module(name)


def has_gpu(framework: str) -> bool:
    """Whether the framework sees a GPU (its device activity is then worth recording)."""
    try:
        if framework == "tensorflow":
            tf = _module("tensorflow")
            return bool(tf.config.list_physical_devices("GPU"))
        jax = _module("jax")
        return any(d.platform == "gpu" for d in jax.devices())
    except Exception:
        return False


class XlaSession:
    """One framework profiler (``tensorflow`` or ``jax``) run window by window."""

    def __init__(self, framework: str, *, cpu_ops: bool, device: bool, python_stacks: bool) -> None:
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
        self.framework = framework
        # host_tracer_level: 1 the user's TraceMe only, 2 also the framework's ops
        self._host = 2 if cpu_ops else 1
        self._device = 1 if device else 0
        self._python = 1 if python_stacks else 0
        self._dir: Path | None = None
        self._jax: Any = None
        self.running = False

    #: the window's XSpace is a file once stop() returns: the session decodes it on the writer
    rows_on_writer = True

    def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=f"hyperscope-{self.framework}-"))
        if self.framework == "tensorflow":
            tf = _module("tensorflow")
            options = tf.profiler.experimental.ProfilerOptions(
                host_tracer_level=self._host, python_tracer_level=self._python,
                device_tracer_level=self._device,
            )  # fmt: skip
            tf.profiler.experimental.start(str(self._dir), options=options)
        else:
            jax = _module("jax")
            opts = jax.profiler.ProfileOptions()
            opts.host_tracer_level = self._host
            opts.python_tracer_level = self._python
            self._jax = _jax_session(jax, opts)
            if self._jax is None:
                jax.profiler.start_trace(str(self._dir), profiler_options=opts)
        self.running = True

    def stop(self) -> Any:
        """End the window; the directory its XSpace was written into, or (JAX) the XSpace's bytes:
        read it with ``rows``."""
        self.running = False
        if self.framework == "tensorflow":
            tf = _module("tensorflow")
            tf.profiler.experimental.stop()
        elif self._jax is not None:
            # the XSpace itself: jax.profiler.stop_trace would also write it to a file and convert
            # it to trace JSON (most of its stop), neither of which hyperscope reads
            session, self._jax = self._jax, None
            shutil.rmtree(self._dir or "", ignore_errors=True)
            self._dir = None
            return session.stop()
        else:
            jax = _module("jax")
            jax.profiler.stop_trace()
        out, self._dir = self._dir, None
        return out

    def discard(self, result: Any) -> None:
        """A window's files, not read (the profiler was switched off)."""
        if result is not None and not isinstance(result, bytes):
            shutil.rmtree(result, ignore_errors=True)

    def rows(self, result: Any) -> pa.Table:
        """The window's events as raw rows (``torch_backend``'s layout); the files removed after."""
        if result is None:
            return RAW_SCHEMA.empty_table()
        # The profiler freed its trace buffers at stop (600 MB for 1000 JAX steps of XLA ops), in
        # the arenas of the threads that filled them: glibc keeps them resident, and the decoding
        # here (on the writer's thread, in its own arena) came on top. Handed back first, on this
        # thread, not the training's: ~0.1 s of CPU for 1 GB.
        trim_malloc()
        if isinstance(result, bytes):  # JAX's XSpace, handed over by its profiler session
            return xplane.rows_of(result, Path(f"<the {self.framework} profiler>"), host_pid=os.getpid())
        directory = Path(result)
        try:
            files = sorted(directory.rglob("*.xplane.pb"))
            if not files:
                raise RuntimeError(f"the {self.framework} profiler wrote no .xplane.pb into {directory}")
            tables = [xplane.read_rows(f, host_pid=os.getpid()) for f in files]
            return pa.concat_tables(tables)
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def _jax_session(jax: Any, options: Any) -> Any:
    """JAX's profiler session, run directly: its ``stop()`` returns the XSpace as bytes. None where
    this JAX has no such session (it is not public API): ``start_trace`` is used then."""
    try:
        from jax._src.lib import _profiler  # type: ignore[import-not-found,unused-ignore]

        jax.devices()  # the backends exist before the session starts (start_trace does the same)
        return _profiler.ProfilerSession(options)
    except Exception:
        return None
