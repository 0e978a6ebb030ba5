"""The public surface is small and deliberate: changing it is a decision, not an accident."""

import hyperscope


def test_all_is_the_public_api() -> None:
    assert sorted(hyperscope.__all__) == [
        "HyperscopeError",
        "ImportReport",
        "Job",
        "JobNotFound",
        "JobStatus",
        "ProfilerConfig",
        "Store",
        "StoreError",
        "TraceFormatError",
        "UsageError",
        "__version__",
        "annotate",
        "annotation_begin",
        "annotation_end",
        "start_profiling",
        "step",
        "stop_profiling",
    ]
    for name in hyperscope.__all__:
        assert getattr(hyperscope, name) is not None


def test_errors_share_one_root() -> None:
    for name in ("JobNotFound", "StoreError", "TraceFormatError", "UsageError"):
        assert issubclass(getattr(hyperscope, name), hyperscope.HyperscopeError)


def test_importing_hyperscope_does_not_import_torch() -> None:
    """Scripts that never profile pay nothing for PyTorch through us."""
    import subprocess
    import sys

    code = "import sys, hyperscope; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
