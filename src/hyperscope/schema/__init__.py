"""The event contract shared by capture, store, analysis, server and UI."""

from hyperscope.schema.events import (
    ARG_COLUMNS,
    CATEGORY_KINDS,
    CORE_COLUMNS,
    EVENT_SCHEMA,
    PHASES,
    SAMPLE_SCHEMA,
    SCHEMA_VERSION,
    SORT_KEY,
    TAIL_COLUMNS,
    ArgColumn,
    Column,
    EventKind,
    SampleMetric,
)
from hyperscope.schema.layout import ProfileMeta, RankMeta

__all__ = [
    "ARG_COLUMNS",
    "CATEGORY_KINDS",
    "CORE_COLUMNS",
    "EVENT_SCHEMA",
    "PHASES",
    "SAMPLE_SCHEMA",
    "SCHEMA_VERSION",
    "SORT_KEY",
    "TAIL_COLUMNS",
    "ArgColumn",
    "Column",
    "EventKind",
    "ProfileMeta",
    "RankMeta",
    "SampleMetric",
]
