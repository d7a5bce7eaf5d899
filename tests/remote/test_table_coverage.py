"""Coverage: a topic table's ``tierlog.covered`` / ``tierlog.start`` summary maps, round-tripped,
moved forward only, and refused with an error naming the summary key and entry when malformed."""

from __future__ import annotations

import pytest

from tierlog.common.int_bounds import INT64_MAX
from tierlog.errors import CorruptRemoteMetadataError, TableCoverageError
from tierlog.remote.table.coverage import COVERED_KEY, START_KEY, VERSION_KEY, Coverage


def test_round_trip_through_the_summary() -> None:
    coverage = Coverage().advanced(10, 500).advanced(2, 7).started(2, 3)
    summary = coverage.summary()
    assert summary == {COVERED_KEY: '{"2":7,"10":500}', START_KEY: '{"2":3}', VERSION_KEY: "1"}
    assert Coverage.from_summary(summary, "t") == coverage
    assert Coverage.from_summary({}, "t") == Coverage()
    assert Coverage.of_snapshot(None, "t").covered == {}


def test_a_partition_not_covered_has_no_end() -> None:
    coverage = Coverage().advanced(0, 0)
    assert coverage.end(0) == 0
    assert coverage.end(1) is None


def test_coverage_moves_forward_only() -> None:
    coverage = Coverage().advanced(0, 100).started(0, 20)
    assert coverage.advanced(0, 100) == coverage  # the same end again changes nothing
    with pytest.raises(TableCoverageError, match=r"partition 0: covered end 99 .* 100"):
        coverage.advanced(0, 99)
    with pytest.raises(TableCoverageError, match=r"partition 0: start 19 .* 20"):
        coverage.started(0, 19)
    with pytest.raises(TableCoverageError, match="partition"):
        coverage.advanced(-1, 5)
    with pytest.raises(TableCoverageError, match="end offset"):
        coverage.advanced(0, INT64_MAX + 1)


def test_a_start_past_the_covered_end_raises_it() -> None:
    # The rows between are gone from the log: nothing is left to cover below the new start.
    coverage = Coverage().advanced(0, 100).started(0, 150).started(1, 7)
    assert coverage.covered == {0: 150, 1: 7}
    assert coverage.start == {0: 150, 1: 7}


def test_the_maps_cannot_be_changed_in_place() -> None:
    coverage = Coverage().advanced(0, 1)
    with pytest.raises(TypeError):
        coverage.covered[0] = 5  # type: ignore[index]


@pytest.mark.parametrize(("summary", "names"), [
    ({COVERED_KEY: "{not json"}, [COVERED_KEY, "not JSON"]),
    ({COVERED_KEY: "[1, 2]"}, [COVERED_KEY, "JSON object"]),
    ({COVERED_KEY: '{"p0": 5}'}, [COVERED_KEY, "'p0'", "partition number"]),
    ({COVERED_KEY: '{"01": 5}'}, [COVERED_KEY, "'01'"]),
    ({COVERED_KEY: '{"-1": 5}'}, [COVERED_KEY, "'-1'"]),
    ({COVERED_KEY: '{"4294967296": 5}'}, [COVERED_KEY, "'4294967296'", "partition"]),
    ({COVERED_KEY: '{"0": -5}'}, [COVERED_KEY, "'0'", "-5"]),
    ({COVERED_KEY: '{"0": true}'}, [COVERED_KEY, "'0'", "must be an int"]),
    ({COVERED_KEY: '{"0": "5"}'}, [COVERED_KEY, "'0'", "must be an int"]),
    ({COVERED_KEY: '{"0": 5}', START_KEY: '{"0": 6}'}, [START_KEY, "'0'", "above"]),
    ({COVERED_KEY: '{"0": 5}', START_KEY: '{"1": 0}'}, [START_KEY, "'1'"]),
    ({VERSION_KEY: "2"}, [VERSION_KEY, "'2'"]),
])
def test_a_malformed_summary_is_refused_naming_the_key(summary: dict[str, str],
                                                       names: list[str]) -> None:
    with pytest.raises(CorruptRemoteMetadataError) as raised:
        Coverage.from_summary(summary, "table clicks snapshot 42")
    message = str(raised.value)
    assert "table clicks snapshot 42" in message
    for name in names:
        assert name in message
