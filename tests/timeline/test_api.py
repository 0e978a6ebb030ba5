"""The public surface of hyperscope.timeline is what __all__ lists, and all of it exists."""

from __future__ import annotations

from hyperscope import timeline


def test_all_lists_the_public_surface() -> None:
    assert sorted(timeline.__all__) == [
        "EventNotFound", "Index", "Row", "Tile", "build", "decode", "encode", "event", "flows",
        "links", "load", "sample_tile", "search", "snap", "span", "steps", "tile", "tree",
    ]  # fmt: skip
    for name in timeline.__all__:
        assert getattr(timeline, name) is not None, name
