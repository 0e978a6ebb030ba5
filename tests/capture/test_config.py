"""ProfilerConfig validates itself, names the bad field, and travels through the environment."""

from __future__ import annotations

import pytest

from hyperscope import ProfilerConfig, UsageError
from hyperscope.capture.config import parse_steps


@pytest.mark.parametrize(
    ("kwargs", "field", "bad"),
    [
        ({"steps": range(0)}, "steps", "range(0, 0)"),
        ({"steps": [3, -1]}, "steps", "[3, -1]"),
        ({"steps": "10:40"}, "steps", "'10:40'"),
        ({"duration_s": 0}, "duration_s", "0"),
        ({"duration_s": float("nan")}, "duration_s", "nan"),
        ({"sample_interval_s": -1}, "sample_interval_s", "-1"),
        ({"sample_interval_s": 0.001}, "sample_interval_s", "0.001"),
        ({"flush_every_steps": 0}, "flush_every_steps", "0"),
        ({"flush_min_gap_s": -1}, "flush_min_gap_s", "-1"),
        ({"cpu_ops": "yes"}, "cpu_ops", "'yes'"),
        ({"job": "  "}, "job", "'  '"),
        ({"max_buffered_events": 10}, "max_buffered_events", "10"),
        ({"tags": {"a": 1}}, "tags", "{'a': 1}"),
    ],
)
def test_errors_name_the_field_and_the_value(kwargs: dict[str, object], field: str, bad: str) -> None:
    with pytest.raises(UsageError) as info:
        ProfilerConfig(**kwargs)  # type: ignore[arg-type]
    assert f"ProfilerConfig.{field} is {bad}" in str(info.value)
    assert "expected" in str(info.value)


def test_defaults_suit_a_first_run() -> None:
    config = ProfilerConfig()
    assert config.device and not config.cpu_ops and config.sample_interval_s > 0
    assert config.wants_step(0) and config.wants_step(10**6) and config.last_step is None
    assert ProfilerConfig(memory=True).records_cpu_ops


def test_steps_select_the_window() -> None:
    config = ProfilerConfig(steps=range(10, 40))
    assert not config.wants_step(9) and config.wants_step(10) and config.wants_step(39)
    assert not config.wants_step(40) and config.last_step == 39


def test_environment_round_trip() -> None:
    config = ProfilerConfig(
        job="llama",
        steps=[3, 5, 8],
        duration_s=12.5,
        cpu_ops=True,
        sample_interval_s=0.1,
        perf_counters=False,
        home="/tmp/x",
        flush_every_steps=4,
        tags={"model": "7b", "git": "abc"},
    )
    assert ProfilerConfig.from_env(config.to_env()) == config
    assert ProfilerConfig.from_env({}) == ProfilerConfig()
    ranged = ProfilerConfig(steps=range(10, 40))
    assert ProfilerConfig.from_env(ranged.to_env()).steps == range(10, 40)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("HYPERSCOPE_STEPS", "40:10", "START:STOP with STOP > START"),
        ("HYPERSCOPE_CPU_OPS", "maybe", "1 or 0"),
        ("HYPERSCOPE_FLUSH_EVERY_STEPS", "ten", "a whole number"),
        ("HYPERSCOPE_DURATION_S", "5m", "a number of seconds"),
        ("HYPERSCOPE_TAGS", "novalue", "key=value pairs"),
    ],
)
def test_environment_errors_name_the_variable(name: str, value: str, expected: str) -> None:
    with pytest.raises(UsageError) as info:
        ProfilerConfig.from_env({name: value})
    assert f"${name} is {value!r}" in str(info.value) and expected in str(info.value)


def test_environment_values_are_validated_too() -> None:
    with pytest.raises(UsageError, match=r"sample_interval_s is 5000.0.*HYPERSCOPE_"):
        ProfilerConfig.from_env({"HYPERSCOPE_SAMPLE_INTERVAL_S": "5000"})


def test_parse_steps() -> None:
    assert parse_steps("10:40") == range(10, 40)
    assert parse_steps("8,3,5,3") == [3, 5, 8]
    assert parse_steps(" 7 ") == [7]
    for bad in ("", "a:b", "10:", "-3", "1.5"):
        with pytest.raises(ValueError):
            parse_steps(bad)
