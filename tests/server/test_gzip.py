"""The spliced gzip answers of cached dashboards decode, strictly, to the whole JSON."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest

from hyperscope.server import _gzip


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [
        (b'{"tables":{"a":[1,2,3]}', b',"cached":true}'),
        (b"", b"only an ending"),
        (b"only a beginning", b""),
        (os.urandom(70_000) + b"x" * 200_000, b'"elapsed_ms":1.5}' * 3),  # blocks of every kind
    ],
)
def test_a_head_finished_by_any_ending_is_one_valid_gzip_member(prefix: bytes, suffix: bytes) -> None:
    start = _gzip.head(prefix)
    whole = _gzip.finish(start, suffix)
    assert gzip.decompress(whole) == prefix + suffix
    strict = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # checks the CRC-32 and length trailer
    assert strict.decompress(whole) == prefix + suffix and strict.eof and strict.unused_data == b""


def test_one_head_serves_many_endings_and_stays_smaller_than_the_json() -> None:
    tables = b'{"tables":' + b'{"kernel":"sm90_xmma_gemm_bf16","dur_ns":12345},' * 2000
    start = _gzip.head(tables)
    for n in range(3):
        ending = b'"cached":true,"elapsed_ms":%d}' % n
        answer = _gzip.finish(start, ending)
        assert gzip.decompress(answer) == tables + ending
        assert len(answer) < len(gzip.compress(tables + ending, 5)) + 64  # a few bytes of splice
