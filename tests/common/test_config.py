"""LogConfig: Kafka's names and defaults, string parsing, and errors that name the key."""

from __future__ import annotations

import pytest

from tierlog import LogConfig
from tierlog.config import LONG_MAX, TOPIC_CONFIG_KEYS
from tierlog.errors import ConfigError


def test_kafka_defaults():
    config = LogConfig()
    assert config["segment.bytes"] == 1 << 30
    assert config["segment.ms"] == 604_800_000
    assert config["segment.index.bytes"] == 10 * 1024 * 1024
    assert config["index.interval.bytes"] == 4096
    assert config["max.message.bytes"] == 1_048_588
    assert config["retention.ms"] == 604_800_000
    assert config["retention.bytes"] == -1
    assert config["local.retention.ms"] == -2
    assert config["flush.messages"] == LONG_MAX
    assert config["flush.ms"] == LONG_MAX
    assert config["cleanup.policy"] == ("delete",)
    assert config["min.cleanable.dirty.ratio"] == 0.5
    assert config["file.delete.delay.ms"] == 60_000
    assert config["message.timestamp.type"] == "CreateTime"
    assert config["record.validation"] == "full"  # tierlog's own: records walked, as Kafka
    assert config.segment_bytes == 1 << 30


def test_strings_are_parsed_like_a_properties_file():
    config = LogConfig({"segment.bytes": "1048576", "preallocate": "true",
                        "cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.1"})
    assert config["segment.bytes"] == 1 << 20
    assert config["preallocate"] is True
    assert config["cleanup.policy"] == ("compact", "delete")
    assert config["min.cleanable.dirty.ratio"] == 0.1
    assert config.overrides == {"segment.bytes": 1 << 20, "preallocate": True,
                                "cleanup.policy": ("compact", "delete"),
                                "min.cleanable.dirty.ratio": 0.1}


@pytest.mark.parametrize("key, value, message", [
    ("segment.bytes", "big", "expected an integer"),
    ("segment.bytes", 10, "below the minimum"),
    ("segment.bytes", 1 << 40, "above the maximum"),
    ("preallocate", "yes", "true or false"),
    ("message.timestamp.type", "WallClock", "not one of"),
    ("min.cleanable.dirty.ratio", 1.5, "above the maximum"),
    ("segment.jitter.ms", 10**12, "segment.ms"),
    ("not.a.key", 1, "unknown"),
])
def test_bad_values_raise_config_error_naming_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message) as info:
        LogConfig({key: value})
    assert info.value.key in (key, "segment.jitter.ms")
    assert key in str(info.value) or info.value.key == "segment.jitter.ms"


def test_every_key_is_documented():
    for key in TOPIC_CONFIG_KEYS.values():
        assert key.doc and key.doc.endswith(".")
        LogConfig({key.name: key.default if not isinstance(key.default, tuple) else ",".join(key.default)})


def test_with_overrides_keeps_earlier_overrides():
    base = LogConfig({"segment.bytes": 1 << 20})
    merged = base.with_overrides({"retention.ms": 1000})
    assert merged["segment.bytes"] == 1 << 20 and merged["retention.ms"] == 1000
