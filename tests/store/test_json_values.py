"""The compiled count of complete JSON values (``_json_values.c``) that the streaming reader checks
each cut with: wherever it answers, it answers what msgspec does (its count and the longest
value's bytes); where it is not sure it says so, and msgspec decides."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from hyperscope.store import _creader
from hyperscope.store._tracefile import TraceFile
from hyperscope.store.synth import SynthSpec, write_job

pytestmark = pytest.mark.skipif(
    _creader._library() is None, reason="no C compiler: the compiled reader cannot be built here"
)

_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def _msgspec(text: bytes) -> tuple[int, int] | None:
    try:
        values = _RAW.decode(b"[" + text + b"]")
    except (msgspec.DecodeError, RecursionError):
        return None
    return len(values), max(map(len, values), default=0)


def _agrees(text: bytes) -> tuple[int, int] | None:
    got = _creader.count_values(text)
    if got is not None:
        assert got == _msgspec(text), text[:200]
    return got


SURE = [
    b"",
    b"  \n\t ",
    b'{"a":1}',
    b'{"a":1},{"b":2}',
    b'{"a":1} ,\n  {"b":2}',
    b'{"ph":"X","args":{"l":[{"a":1},{"b":[]}],"s":"}, {"}}',
    b'1, -0, 0.5, 1e5, 1E+5, -2.5e-3, "x", true, false, null, [], {}',
    b'{"s":"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u0000"}',
    '{"s":"é ü 😀 中"}'.encode(),
    b"[" * 100 + b"]" * 100,
]

UNSURE = [
    b'{"a":1},',  # a trailing comma
    b',{"a":1}',
    b'{"a":1},,{"b":2}',
    b'{"a":1}{"b":2}',  # no comma
    b'{"a":1},{"b"',  # cut inside an event
    b'{"a":"}, {',  # cut inside a string
    b'{"a":[{"b":1}',  # cut inside a nested list
    b'{"a":1}}',
    b'{"a":01}',
    b'{"a":1.}',
    b'{"a":.5}',
    b'{"a":-}',
    b'{"a":1e}',
    b'{"a":tru}',
    b'{"a":nul}',
    b'{"a":"\x01"}',  # a control character
    b'{"a":"\\x"}',
    b'{"a":"\\u12G4"}',
    b'{"a":"\\ud83d\\ude00"}',  # a surrogate pair: msgspec decides
    b'{"a":"\\udc00"}',  # a lone one
    b'{"a":"\xff"}',  # not UTF-8
    b'{"a":"\xed\xa0\x80"}',  # a surrogate in UTF-8
    b'{"a" 1}',
    b'{"a":1 "b":2}',
    b"{1:2}",
    b"[" * 200 + b"]" * 200,  # deeper than it counts
    b"\xef\xbb\xbf{}",  # a BOM is not whitespace
]


@pytest.mark.parametrize("text", SURE)
def test_valid_values_are_counted(text: bytes) -> None:
    assert _agrees(text) is not None


@pytest.mark.parametrize("text", UNSURE)
def test_what_it_is_not_sure_of_is_left_to_msgspec(text: bytes) -> None:
    assert _creader.count_values(text) is None


#: What ends a run of plain string bytes, which the scanners find eight bytes at a time
#: (``_json_plain.h``): each one placed at every offset of a string of every length up to 24.
_SPECIAL = ['"', "\\\\", "\\n", "\\u00e9", "é", "😀", "\x7f", " ", "~"]


@pytest.mark.parametrize("special", _SPECIAL)
def test_strings_with_a_special_byte_at_every_offset(special: str) -> None:
    for length in range(25):
        for at in range(length + 1):
            inner = "a" * at + special + "b" * (length - at)
            text = ('{"s":"' + inner + '","t":1},{"u":"' + inner + '"}').encode()
            counted = _agrees(text)
            assert (counted is not None) == (special != '"'), text  # a bare quote ends the string
    control = b'{"s":"' + b"a" * 11 + b"\x01" + b'"}'
    assert _creader.count_values(control) is None  # a raw control character: msgspec decides


def test_every_cut_of_a_generated_trace(tmp_path: Path) -> None:
    """Whatever prefix of real chunks it is given, it answers as msgspec or not at all."""
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=1, steps=2, ops_per_step=30, seed=2))
    text = b"".join(c.text for c in TraceFile(next(job.iterdir())).chunks())
    rng = random.Random(7)
    answered = 0
    for end in [len(text), *rng.sample(range(1, len(text)), 400)]:
        answered += _agrees(text[:end]) is not None
    assert answered >= 1  # the whole text at least


def test_the_largest_value_is_reported(tmp_path: Path) -> None:
    big = b'{"a":"' + b"x" * 5000 + b'"}'
    assert _agrees(b'{"a":1},' + big + b',{"b":2}') == (3, len(big))
