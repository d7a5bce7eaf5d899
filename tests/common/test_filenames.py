"""File names and topic-name validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.common import filenames
from tierlog.errors import InvalidTopicError, LogDirectoryError


def test_segment_names_are_twenty_digits():
    assert filenames.log_file(Path("d"), 42).name == "00000000000000000042.log"
    assert filenames.offset_index_file(Path("d"), 0).name == "00000000000000000000.index"
    assert filenames.time_index_file(Path("d"), 7, ".swap").name == "00000000000000000007.timeindex.swap"
    assert filenames.snapshot_file(Path("d"), 13).name == "00000000000000000013.snapshot"
    assert filenames.offset_from_filename("00000000000000001000.txnindex") == 1000


def test_bad_segment_name():
    with pytest.raises(LogDirectoryError, match="not a segment file"):
        filenames.offset_from_filename("42.log")


def test_partition_dirs():
    assert filenames.partition_dir_name("orders", 3) == "orders-3"
    assert filenames.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert filenames.parse_partition_dir("__consumer_offsets-6") == ("__consumer_offsets", 6)
    with pytest.raises(LogDirectoryError):
        filenames.parse_partition_dir("orders")
    with pytest.raises(InvalidTopicError):
        filenames.partition_dir_name("orders", -1)


@pytest.mark.parametrize("topic", ["a", "A.b_c-9", "x" * 249])
def test_legal_topics(topic):
    assert filenames.validate_topic(topic) == topic


@pytest.mark.parametrize("topic", ["", ".", "..", "../x", "a/b", "a b", "ü", "x" * 250, None])
def test_illegal_topics(topic):
    with pytest.raises(InvalidTopicError):
        filenames.validate_topic(topic)
