"""duration_ms: kio's timedelta duration fields as exact milliseconds (the one home)."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from tierlog.server.framing import duration_ms


def test_a_timeout_of_1001_ms_stays_1001() -> None:
    # int(total_seconds() * 1000) answered 1000: 1.001 * 1000 is 1000.9999999999999.
    assert duration_ms(datetime.timedelta(milliseconds=1001)) == 1001


@given(st.integers(min_value=0, max_value=(1 << 31) - 1))
def test_every_int32_millisecond_duration_round_trips(ms: int) -> None:
    assert duration_ms(datetime.timedelta(milliseconds=ms)) == ms


def test_a_plain_int_is_taken_as_milliseconds() -> None:
    assert duration_ms(45_000) == 45_000
