"""The codec's Duration conversions give what protobuf's own helpers give."""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.protobuf import duration_pb2

from shardcron.client.codec.common import get_duration, set_duration
from shardcron.v1 import worker_pb2

SAMPLES = [
    timedelta(0),
    timedelta(microseconds=1),
    timedelta(microseconds=-1),
    timedelta(seconds=30),
    timedelta(seconds=-1),
    timedelta(seconds=-1, microseconds=-250),
    timedelta(days=-1, microseconds=5),
    timedelta(days=3650, seconds=7, microseconds=999_999),
    timedelta(days=-3650, microseconds=123_456),
]


@pytest.mark.parametrize("value", SAMPLES)
def test_a_duration_is_set_as_from_timedelta_sets_it(value: timedelta) -> None:
    msg = worker_pb2.Lease()
    set_duration(msg, "timeout", value)
    expected = duration_pb2.Duration()
    expected.FromTimedelta(value)
    assert (msg.timeout.seconds, msg.timeout.nanos) == (expected.seconds, expected.nanos)
    if value >= timedelta(0):
        assert get_duration(msg, "timeout", "") == expected.ToTimedelta() == value


@pytest.mark.parametrize("nanos", [0, 1, 999, 1_000, 500_000_999, 999_999_999])
def test_a_duration_read_drops_what_is_below_a_microsecond_as_to_timedelta_does(
    nanos: int,
) -> None:
    msg = worker_pb2.Lease(timeout=duration_pb2.Duration(seconds=5, nanos=nanos))
    assert get_duration(msg, "timeout", "") == msg.timeout.ToTimedelta()
