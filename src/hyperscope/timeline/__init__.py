"""The timeline: rows of a profile, tiles of any window at any zoom, and launch → kernel links.

Pure functions over a profile's timeline index (:mod:`hyperscope.timeline.index`, built at import
or at first use, and kept beside the profile); the server's ``/timeline`` endpoints and the UI are
their clients.
"""

from __future__ import annotations

from hyperscope.timeline.index import Index, build, load, span
from hyperscope.timeline.links import EventNotFound, event, flows, links, search
from hyperscope.timeline.rows import Row, sample_tile, steps, tree
from hyperscope.timeline.tile import Tile, decode, encode, snap, tile

__all__ = [
    "EventNotFound",
    "Index",
    "Row",
    "Tile",
    "build",
    "decode",
    "encode",
    "event",
    "flows",
    "links",
    "load",
    "sample_tile",
    "search",
    "snap",
    "span",
    "steps",
    "tile",
    "tree",
]
