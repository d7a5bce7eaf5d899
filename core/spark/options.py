"""The ``tierlog`` data source's options, parsed and checked as Spark's Kafka source checks
its own (same names, same meanings, same failing combinations), with no pyspark import: the
batch reader uses them now, a streaming reader will share them.

Parsing (``TierlogOptions.parse``) checks what holds for every query; ``check_batch`` adds
what a batch query refuses (a ``latest`` start), as Spark does when the
query is planned.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.errors import ConfigError
from tierlog.reader import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_SPLIT_BYTES,
    EARLIEST,
    ISOLATION_LEVELS,
    LATEST,
    READ_UNCOMMITTED,
    TIMESTAMP_STRATEGIES,
    RemoteTopicReader,
)
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.tier.options import (
    SPARK_PREFIXES,
    backend_for_url,
    filesystem_kwargs,
    options_under,
    parse_options,
)

log = logging.getLogger(__name__)

NAME = "tierlog"
#: ``storage.<name>`` (``fsspec.<name>`` is an alias): the remote storage options.
STORAGE_PREFIXES = SPARK_PREFIXES
#: Spark's Kafka source passes ``kafka.<name>`` to its consumer; tierlog reads the tier at
#: ``path`` instead, so these are ignored (with one warning), except the isolation level.
KAFKA_PREFIX = "kafka."
KAFKA_ISOLATION_LEVEL = "kafka.isolation.level"
_KNOWN = frozenset({
    "path", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "isolation.level",
    KAFKA_ISOLATION_LEVEL, "failondataloss", "includeheaders", "minpartitions", "splitbytes",
    "batchrows", "filterpushdown", "topicid", "maxoffsetspertrigger",
})
#: Options a streaming query refuses, as Spark's Kafka source does (a stream has no end).
_ENDING_OPTIONS = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
_TOPIC_OPTIONS = ("subscribe", "subscribepattern", "assign")

#: ``{"topic": {partition: value}}``: per-partition offsets or timestamps of a JSON option.
PerTopic = dict[str, dict[int, int]]


def _json(key: str, text: str) -> object:
    """``text`` decoded (any JSON value; the caller checks its shape), or ConfigError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(key, f"is not valid JSON: {e}") from e


def parse_int(key: str, text: str, minimum: int | None = None) -> int:
    """``text`` as an integer of at least ``minimum``; ConfigError naming ``key`` if not."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {value}")
    return value


def parse_bool(key: str, text: str) -> bool:
    """``true``/``false`` (any case); ConfigError naming ``key`` otherwise."""
    if text.strip().lower() not in ("true", "false"):
        raise ConfigError(key, f"must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _per_topic(key: str, text: str) -> PerTopic:
    """``{"topic": {"0": 23}}`` -> ``{"topic": {0: 23}}``."""
    data = _json(key, text)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(key, 'must be a JSON object like {"topic": {"0": 23}}')
    try:
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (TypeError, ValueError) as e:
        raise ConfigError(key, f"partitions and values must be integers: {e}") from e


def _topic_ids(key: str, text: str) -> str | dict[str, str]:
    """``<id>`` or ``{"topic": "<id>"}``, each a Kafka topic id (22 base64url characters)."""
    stripped = text.strip()
    ids = _json(key, stripped) if stripped.startswith("{") else stripped
    assert isinstance(ids, (str, dict))  # JSON text that starts with "{" is an object
    pairs = ids.items() if isinstance(ids, dict) else [("topic", ids)]
    for topic, topic_id in pairs:
        try:
            TopicIdPartition(topic_id, str(topic), 0)
        except (TypeError, ValueError) as e:
            raise ConfigError(key, f"{topic_id!r} is not a topic id: {e}") from None
    return ids


def _offsets(key: str, text: str, *, ending: bool) -> str | PerTopic:
    """``earliest``, ``latest`` or JSON per-partition offsets (-2 earliest, -1 latest); an
    end is never earliest (Spark refuses it in every query)."""
    word = text.strip().lower()
    if word == "latest" or (word == "earliest" and not ending):
        return word
    if word == "earliest":
        raise ConfigError(key, "an ending offset cannot be 'earliest'")
    offsets = _per_topic(key, text)
    if ending and any(o == EARLIEST for _, _, o in _flatten(offsets)):
        raise ConfigError(key, "an ending offset cannot be -2 (earliest)")
    for topic, parts in offsets.items():
        for partition, offset in parts.items():
            if offset < EARLIEST:
                raise ConfigError(key, f"{topic}-{partition}: offset {offset} is negative "
                                       f"(only -2 = earliest and -1 = latest are special)")
    return offsets


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    if not text.strip().startswith("{"):
        raise ConfigError("assign", f'no topic partitions to assign in {text!r}: it must be a '
                                    f'JSON object like {{"orders": [0, 1]}}')
    data = _json("assign", text)
    assert isinstance(data, dict)  # JSON text that starts with "{" is an object
    try:
        return {t: tuple(int(p) for p in ps) for t, ps in data.items()}
    except (TypeError, ValueError, AttributeError) as e:
        raise ConfigError("assign", f'must be a JSON object like {{"orders": [0, 1]}}: {e}'
                          ) from None


@dataclass(frozen=True)
class TierlogOptions:
    """The data source's options, parsed and validated (ConfigError names a bad key). The
    storage options stay out of the repr: they may hold credentials."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: str | PerTopic = "earliest"
    ending_offsets: str | PerTopic = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: PerTopic | None = None
    ending_by_timestamp: PerTopic | None = None
    timestamp_strategy: str = "error"
    """``startingOffsetsByTimestampStrategy``: what a starting timestamp later than every
    record of a partition means: ``error`` (Spark's default) or ``latest`` (read nothing)."""
    isolation_level: str = READ_UNCOMMITTED
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    split_bytes: int = DEFAULT_SPLIT_BYTES
    batch_rows: int = DEFAULT_BATCH_ROWS
    filter_pushdown: bool = False
    topic_ids: str | dict[str, str] | None = None
    """``topicId``: the incarnation to read (one id, or JSON ``{"orders": "<id>"}`` per
    topic); without it the newest incarnation of a re-created topic is read."""
    ignored_kafka_options: tuple[str, ...] = ()
    """The ``kafka.*`` options given, which tierlog does not use (it reads ``path``)."""
    max_offsets_per_trigger: int | None = None
    """``maxOffsetsPerTrigger``: a streaming micro-batch reads at most this many offsets,
    split across partitions in proportion to their backlog (ignored by batch queries)."""

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> TierlogOptions:
        """Parse Spark's (case-insensitive) options; ConfigError names the first bad one.
        Ignored ``kafka.*`` options are logged in one warning naming ``path``. A
        ``streaming`` query starts at ``latest`` by default (as Spark's Kafka source) and
        refuses the ending options."""
        opts = {k.lower(): str(v) for k, v in options.items()}
        if streaming:
            _refuse_ending_options(opts)
            opts.setdefault("startingoffsets", "latest")
        raw_storage = options_under(STORAGE_PREFIXES, opts)
        ignored = _take_out_storage_and_kafka(opts)
        if "path" not in opts:
            raise ConfigError("path", "the URL of the remote tier is required")
        # The writer's option names and checks (tierlog.remote.tier.options), under storage.
        storage = parse_options(backend_for_url(opts["path"]), raw_storage,
                                prefix=STORAGE_PREFIXES[0])
        filesystem_kwargs(opts["path"], storage, prefix=STORAGE_PREFIXES[0])
        values: dict[str, Any] = {"url": opts["path"], "storage_options": storage,
                                  "ignored_kafka_options": tuple(ignored)}
        values.update(_topic_choice(opts))
        values.update(_limits(opts))
        values.update(_settings(opts))
        parsed = cls(**values)
        parsed._check_start_not_after_end()
        if ignored:
            log.warning("%s reads the tier at path=%s, not a Kafka cluster: the kafka.* "
                        "options %s are ignored (kafka.isolation.level is honoured)",
                        NAME, parsed.url, ", ".join(ignored))
        return parsed

    def check_batch(self) -> None:
        """What a batch query refuses, as Spark's Kafka source: a start at ``latest`` (a
        batch reads a fixed range that ends at latest, so it would read nothing). A
        ``maxOffsetsPerTrigger`` is ignored with a warning, as there."""
        if self.max_offsets_per_trigger is not None:
            log.warning("%s: maxOffsetsPerTrigger is ignored in batch queries", NAME)
        starting = self.starting_offsets
        uses_offsets = self.starting_timestamp is None and self.starting_by_timestamp is None
        if uses_offsets and starting == "latest":
            raise ConfigError("startingoffsets", "starting offset can't be latest for batch "
                                                 "queries (use earliest, offsets or a timestamp)")
        if uses_offsets and isinstance(starting, dict):
            for topic, partition, offset in _flatten(starting):
                if offset == LATEST:
                    raise ConfigError("startingoffsets", f"{topic}-{partition}: starting "
                                                         f"offset can't be -1 (latest) for "
                                                         f"batch queries")

    def _check_start_not_after_end(self) -> None:
        """Where the start and the end are given the same way (after the precedence
        timestamp > by-timestamp > offsets), each start is at most its end, as Spark checks
        them before any read."""
        start, end = self.limit("starting"), self.limit("ending")
        if start[0] != end[0]:
            return
        what, first, last = start[0], start[1], end[1]
        if isinstance(first, int) and isinstance(last, int):
            if first > last:
                raise ConfigError("startingtimestamp", f"{first} is after endingTimestamp "
                                                       f"{last}")
            return
        if not isinstance(first, dict) or not isinstance(last, dict):
            return
        for topic, partition, offset in _flatten(first):
            bound = last.get(topic, {}).get(partition)
            if bound is not None and offset >= 0 and bound >= 0 and offset > bound:
                raise ConfigError(f"starting{what}", f"{topic}-{partition}: start {offset} is "
                                                     f"after the end {bound} given by "
                                                     f"ending{what}")

    def limit(self, side: str) -> tuple[str, int | str | PerTopic]:
        """``(how, value)`` of where ``side`` ("starting"/"ending") is, by Spark's precedence:
        ``how`` is ``timestamp``, ``offsetsbytimestamp`` or ``offsets``."""
        timestamp = getattr(self, f"{side}_timestamp")
        by_timestamp = getattr(self, f"{side}_by_timestamp")
        if timestamp is not None:
            return "timestamp", timestamp
        if by_timestamp is not None:
            return "offsetsbytimestamp", by_timestamp
        return "offsets", getattr(self, f"{side}_offsets")

    def topic_id(self, topic: str) -> str | None:
        """The incarnation of ``topic`` the ``topicId`` option chooses (None: the newest)."""
        if isinstance(self.topic_ids, dict):
            return self.topic_ids.get(topic)
        return self.topic_ids

    def topics(self, reader: RemoteTopicReader) -> list[str]:
        """The topics to read: subscribed, matching the pattern, or assigned."""
        if self.subscribe:
            return list(self.subscribe)
        if self.assign is not None:
            return sorted(self.assign)
        pattern = re.compile(self.subscribe_pattern or "")
        return [t for t in reader.list_topics() if pattern.fullmatch(t)]

    def starting_for(self, topic: str) -> tuple[str | dict[int, int], int | dict[int, int] | None]:
        """``(offsets, timestamps)`` where ``topic``'s read starts: the timestamps take
        precedence (``startingTimestamp`` over ``startingOffsetsByTimestamp``) where given."""
        return (_for_topic(self.starting_offsets, topic),
                _timestamps(self.starting_timestamp, self.starting_by_timestamp, topic))

    def ending_for(self, topic: str) -> tuple[str | dict[int, int], int | dict[int, int] | None]:
        """``(offsets, timestamps)`` where ``topic``'s read ends (exclusive)."""
        return (_for_topic(self.ending_offsets, topic),
                _timestamps(self.ending_timestamp, self.ending_by_timestamp, topic))


def _topic_choice(opts: Mapping[str, str]) -> dict[str, Any]:
    """Exactly one of subscribe, subscribePattern and assign, each non-empty (Spark's rule)."""
    chosen = [k for k in _TOPIC_OPTIONS if k in opts]
    if len(chosen) != 1:
        raise ConfigError("subscribe", f"exactly one of subscribe, subscribePattern and "
                                       f"assign is required, got "
                                       f"{', '.join(chosen) if chosen else 'none'}")
    key = chosen[0]
    if key == "subscribe":
        topics = tuple(t.strip() for t in opts[key].split(",") if t.strip())
        if not topics:
            raise ConfigError(key, f"no topics to subscribe to in {opts[key]!r}")
        return {"subscribe": topics}
    if key == "subscribepattern":
        pattern = opts[key].strip()
        if not pattern:
            raise ConfigError(key, "the pattern to subscribe to is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(key, f"{pattern!r} is not a regular expression: {e}") from None
        return {"subscribe_pattern": pattern}
    return {"assign": _assign(opts[key])}


def _refuse_ending_options(opts: Mapping[str, str]) -> None:
    """A streaming query refuses the ending options, as Spark's Kafka source does."""
    for key in _ENDING_OPTIONS:
        if key in opts:
            raise ConfigError(key, "is not valid in streaming queries (a stream has "
                                   "no end; use it with spark.read)")


def _take_out_storage_and_kafka(opts: dict[str, str]) -> list[str]:
    """Remove the storage options and the ignored ``kafka.*`` ones from ``opts`` (returning
    the latter, sorted); ConfigError for an option the data source does not know."""
    ignored = sorted(k for k in opts if k.startswith(KAFKA_PREFIX)
                     and k != KAFKA_ISOLATION_LEVEL)
    for key in list(opts):
        if key.startswith(STORAGE_PREFIXES) or key in ignored:
            del opts[key]
        elif key not in _KNOWN:
            raise ConfigError(key, f"unknown option of the {NAME} data source; known: "
                                   f"{', '.join(sorted(_KNOWN))}, storage.<name>")
    return ignored


def _limits(opts: Mapping[str, str]) -> dict[str, Any]:
    """Where the read starts and ends: the offsets, timestamps and per-partition timestamps
    given, and the by-timestamp strategy (TierlogOptions' field names)."""
    values: dict[str, Any] = {}
    for key, name in (("startingoffsets", "starting_offsets"),
                      ("endingoffsets", "ending_offsets")):
        if key in opts:
            values[name] = _offsets(key, opts[key], ending=key == "endingoffsets")
    for key, name in (("startingtimestamp", "starting_timestamp"),
                      ("endingtimestamp", "ending_timestamp")):
        if key in opts:
            values[name] = parse_int(key, opts[key], minimum=0)
    for key, name in (("startingoffsetsbytimestamp", "starting_by_timestamp"),
                      ("endingoffsetsbytimestamp", "ending_by_timestamp")):
        if key in opts:
            values[name] = _per_topic(key, opts[key])
    if "startingoffsetsbytimestampstrategy" in opts:
        strategy = opts["startingoffsetsbytimestampstrategy"].strip().lower()
        if strategy not in TIMESTAMP_STRATEGIES:
            raise ConfigError("startingoffsetsbytimestampstrategy",
                              f"must be one of {', '.join(TIMESTAMP_STRATEGIES)}, got "
                              f"{strategy!r}")
        values["timestamp_strategy"] = strategy
    return values


def _settings(opts: Mapping[str, str]) -> dict[str, Any]:
    """The isolation level, the flags, the sizes and the topic ids given (TierlogOptions'
    field names)."""
    values: dict[str, Any] = {}
    isolation = _isolation_level(opts)
    if isolation is not None:
        values["isolation_level"] = isolation
    for key, name in (("failondataloss", "fail_on_data_loss"),
                      ("includeheaders", "include_headers"),
                      ("filterpushdown", "filter_pushdown")):
        if key in opts:
            values[name] = parse_bool(key, opts[key])
    for key, name in (("minpartitions", "min_partitions"), ("splitbytes", "split_bytes"),
                      ("batchrows", "batch_rows"),
                      ("maxoffsetspertrigger", "max_offsets_per_trigger")):
        if key in opts:
            values[name] = parse_int(key, opts[key], minimum=1)
    if "topicid" in opts:
        values["topic_ids"] = _topic_ids("topicid", opts["topicid"])
    return values


def _isolation_level(opts: Mapping[str, str]) -> str | None:
    """``kafka.isolation.level`` (Spark's name, the consumer's setting) or ``isolation.level``;
    both given must agree."""
    given = {k: opts[k].strip() for k in ("isolation.level", KAFKA_ISOLATION_LEVEL) if k in opts}
    if len(set(given.values())) > 1:
        raise ConfigError("isolation.level", f"differs from kafka.isolation.level "
                                             f"({given['isolation.level']!r} vs "
                                             f"{given[KAFKA_ISOLATION_LEVEL]!r}); give one")
    for key, value in given.items():
        if value not in ISOLATION_LEVELS:
            raise ConfigError(key, f"must be one of {', '.join(ISOLATION_LEVELS)}, got "
                                   f"{value!r}")
        return value
    return None


def _flatten(per_topic: PerTopic) -> list[tuple[str, int, int]]:
    return [(t, p, v) for t, parts in per_topic.items() for p, v in parts.items()]


def _for_topic(value: str | PerTopic, topic: str) -> str | dict[int, int]:
    return value if isinstance(value, str) else value.get(topic, {})


def _timestamps(every: int | None, per_topic: PerTopic | None, topic: str
                ) -> int | dict[int, int] | None:
    if every is not None:
        return every
    if per_topic is not None and topic in per_topic:
        return per_topic[topic]
    return None
