"""The public surface is small and deliberate: changing it is a decision, not an accident."""

import hyperscope


def test_all_is_the_public_api() -> None:
    assert sorted(hyperscope.__all__) == [
        "HyperscopeError",
        "ImportReport",
        "Job",
        "JobNotFound",
        "JobStatus",
        "Store",
        "StoreError",
        "TraceFormatError",
        "UsageError",
        "__version__",
    ]
    for name in hyperscope.__all__:
        assert getattr(hyperscope, name) is not None


def test_errors_share_one_root() -> None:
    for name in ("JobNotFound", "StoreError", "TraceFormatError", "UsageError"):
        assert issubclass(getattr(hyperscope, name), hyperscope.HyperscopeError)
