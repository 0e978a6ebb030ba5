"""Values that are valid JSON but that no column, clock or later analysis can hold: refused on
import with the file, the event (or header key) and the field, and nothing stored. Every file's
header and rank are checked before any file's events are read (fail fast)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from hyperscope import HyperscopeError, TraceFormatError, UsageError
from hyperscope.schema.events import MAX_NODE_CHARS, MAX_RANK
from tests.store.test_bad_input import (
    _UNKNOWN_FIELD,
    HEADER,
    Baseline,
    check_message,
    cli_message,
    ev,
    events,
    import_fails,
    kineto,
    with_event,
    write,
)
from tests.store.test_bad_input import base as base  # the fixture

#: one event's field → (value as JSON text, words of the message)
BAD_TIMES: dict[str, tuple[str, str, str]] = {
    "negative-ts": ("ts", "-5", "negative"),
    "negative-dur": ("dur", "-1", "negative"),
    "ts-at-the-int64-limit-below-zero": ("ts", "-9223372036854775", "negative"),
    "fractional-negative-dur": ("dur", "-0.25", "negative"),
    "end-beyond-int64": ("dur", "9223372036854775", "64-bit"),
}


@pytest.mark.parametrize("path_taken", ["fast", "exact"])
@pytest.mark.parametrize("name", sorted(BAD_TIMES))
def test_times_no_column_holds_are_refused(
    name: str, path_taken: str, base: Baseline, tmp_path: Path
) -> None:
    field, value, word = BAD_TIMES[name]
    bad = ev(2).replace('"ts":1020.5' if field == "ts" else '"dur":2.25', f'"{field}":{value}')
    if name == "end-beyond-int64":
        bad = ev(2).replace('"ts":1020.5', '"ts":100').replace('"dur":2.25', f'"dur":{value}')
    texts = with_event(2, bad)
    if path_taken == "exact":  # an unknown field sends the chunk through the exact parser
        texts.append(_UNKNOWN_FIELD)
    path = write(tmp_path, "bad.json", kineto(texts))
    exc = import_fails(base, [path])
    check_message(exc, path, index=2, field=field, words=(word,))


def _header(**changes: object) -> dict[str, object]:
    head = {k: (dict(v) if isinstance(v, dict) else v) for k, v in HEADER.items()}
    for key, value in changes.items():
        if key == "rank":
            head["distributedInfo"]["rank"] = value  # type: ignore[index]
        else:
            head[key] = value
    return head


#: header → (field named, words of the message)
BAD_HEADERS: dict[str, tuple[dict[str, object], str, str]] = {
    "rank-beyond-int32": (_header(rank=MAX_RANK + 1), "distributedInfo.rank", "an integer"),
    "rank-is-true": (_header(rank=True), "distributedInfo.rank", "True"),
    "rank-is-negative": (_header(rank=-1), "distributedInfo.rank", "-1"),
    "rank-is-a-string": (_header(rank="3"), "distributedInfo.rank", "'3'"),
    "host-name-of-100000-characters": (_header(host_name="h" * 100_000), "host_name", "100,000 characters"),
    "base-time-of-2-to-the-63": (_header(baseTimeNanoseconds=2**63), "baseTimeNanoseconds", str(2**63)),
    "base-time-is-true": (_header(baseTimeNanoseconds=True), "baseTimeNanoseconds", "True"),
    "base-time-is-negative": (_header(baseTimeNanoseconds=-1), "baseTimeNanoseconds", "-1"),
}


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_header_values_no_column_holds_are_refused(name: str, base: Baseline, tmp_path: Path) -> None:
    head, field, word = BAD_HEADERS[name]
    path = write(tmp_path, "bad.json", kineto(events(), header=head))
    exc = import_fails(base, [path])
    check_message(exc, path, field=field, words=(word,))
    assert len(str(exc)) < 1000  # the 100,000 characters are not repeated back


def test_a_host_name_at_the_limit_imports(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "ok.json", kineto(events(), header=_header(host_name="h" * MAX_NODE_CHARS)))
    report = base.store.import_traces([path], "long-host")
    assert report.ranks[0].node == "h" * MAX_NODE_CHARS


def test_base_time_in_the_trailer_is_checked_too(base: Baseline, tmp_path: Path) -> None:
    content = kineto(events()).replace(
        b'"traceName"', f'"baseTimeNanoseconds": {2**63},\n  "traceName"'.encode()
    )
    path = write(tmp_path, "bad.json", content)
    exc = import_fails(base, [path])
    check_message(exc, path, field="baseTimeNanoseconds", words=(str(2**63),))


def test_base_time_that_pushes_events_beyond_int64_is_refused(base: Baseline, tmp_path: Path) -> None:
    # each value fits; the base plus the events' times does not
    path = write(tmp_path, "bad.json", kineto(events(), header=_header(baseTimeNanoseconds=2**63 - 1000)))
    exc = import_fails(base, [path])
    check_message(exc, path, field="baseTimeNanoseconds", words=("64-bit",))


@pytest.mark.parametrize("rank", [MAX_RANK + 1, -1])
def test_rank_option_out_of_range(rank: int, base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", kineto(events(), header={"schemaVersion": 1}))
    exc = import_fails(base, [path], UsageError, rank=rank)
    assert "--rank" in str(exc)


# -- fail fast ----------------------------------------------------------------------------------------


def _rank_files_that_fail_when_parsed(tmp_path: Path) -> list[Path]:
    """Two rank files with good headers that are refused once read: an unknown phase, and a cut
    at the end (found by the reading thread itself, before any other file is opened)."""
    paths = []
    for rank in (0, 1):
        content = kineto(with_event(1, ev(1, ph="Q"), n=200), header=_header(rank=rank))
        paths.append(write(tmp_path, f"rank{rank}.json", content[: len(content) - 80]))
    return paths


@pytest.mark.parametrize("truth", ["not-a-trace", "trace-without-rank"])
def test_a_file_without_rank_fails_before_any_file_is_parsed(
    truth: str, base: Baseline, tmp_path: Path
) -> None:
    ranks = _rank_files_that_fail_when_parsed(tmp_path)
    body = (
        {"expected": {"kernels": 3}}
        if truth == "not-a-trace"
        else {"traceEvents": orjson.loads(f"[{ev(0)}]")}
    )
    bad = write(tmp_path, "truth.json", orjson.dumps(body))
    assert sorted([*ranks, bad])[-1] == bad  # read last: the old importer parsed the rank files first
    kind: type[HyperscopeError] = TraceFormatError if truth == "not-a-trace" else UsageError
    exc = import_fails(base, [bad.parent], kind)
    assert str(bad) in str(exc) and "rank0" not in str(exc) and "traceEvents[1]" not in str(exc)


def test_two_files_of_one_rank_fail_before_any_file_is_parsed(base: Baseline, tmp_path: Path) -> None:
    ranks = _rank_files_that_fail_when_parsed(tmp_path)
    twin = write(tmp_path, "zz-copy.json", ranks[0].read_bytes())
    exc = import_fails(base, [tmp_path / "in"], UsageError)
    assert "both hold rank 0" in str(exc) and str(twin) in str(exc)


def test_cli_import_of_a_directory_names_the_file_without_rank(base: Baseline, tmp_path: Path) -> None:
    _rank_files_that_fail_when_parsed(tmp_path)
    bad = write(tmp_path, "truth.json", b'{"expected": {"kernels": 3}}')
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "HYPERSCOPE_HOME")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hyperscope",
            "import",
            str(bad.parent),
            "--job",
            "bad-job",
            "--home",
            str(base.home),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    err = cli_message(proc, bad)
    assert "traceEvents" in err and "nothing was imported" in err and "rank0" not in err
    base.assert_nothing_stored()
