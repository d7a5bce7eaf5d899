"""LogConfig: a partition's configuration, with Apache Kafka's topic-level names and defaults.

Values may come as Python values or as strings (from a ``.properties`` file or ``--set``);
both are parsed and validated the same way, and any problem is a ConfigError naming the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeAlias

from tierlog.common.int_bounds import INT32_MAX, INT64_MAX
from tierlog.common.secrets import MASK, is_secret
from tierlog.errors import ConfigError

#: Kafka's names for the bounds of its long and int config types.
LONG_MAX = INT64_MAX
INT_MAX = INT32_MAX


def parse_bool(key: str, raw: object) -> bool:
    """A boolean from a Python bool or ``true``/``false`` (any case); ConfigError naming
    ``key``."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ConfigError(key, f"expected true or false, got {raw!r}")


#: Kafka's (Java's) number syntax in ASCII only: Python's int()/float() would also take other
#: scripts' digits ("\u0661\u0662"), underscores ("1_000"), "nan" and "inf".
_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def parse_int(key: str, raw: object) -> int:
    """An integer from a Python int or its ASCII decimal text; ConfigError naming ``key``."""
    if isinstance(raw, bool):
        raise ConfigError(key, f"expected an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        return int(raw.strip())
    raise ConfigError(key, f"expected an integer, got {raw!r}")


def parse_int_at_least(key: str, raw: object, minimum: int) -> int:
    """:func:`parse_int`, and at least ``minimum`` (ConfigError naming ``key`` otherwise): the
    one home of a bounded integer setting, for the engine, the server and its cluster."""
    value = parse_int(key, raw)
    if value < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {value}")
    return value


def parse_float(key: str, raw: object) -> float:
    """A finite number from a Python int/float or its ASCII decimal text (no nan, no inf)."""
    if isinstance(raw, bool):
        raise ConfigError(key, f"expected a finite number, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str) and _FLOAT_RE.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise ConfigError(key, f"expected a finite number, got {raw!r}")
    if not math.isfinite(value):
        raise ConfigError(key, f"expected a finite number, got {raw!r}")
    return value


def _parse_string(key: str, raw: object) -> str:
    if not isinstance(raw, str):
        raise ConfigError(key, f"expected a string, got {raw!r}")
    return raw.strip()


def _parse_list(key: str, raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        items = [part.strip() for part in raw.split(",")]
    elif isinstance(raw, (list, tuple)):
        items = [str(part).strip() for part in raw]
    else:
        raise ConfigError(key, f"expected a comma-separated list, got {raw!r}")
    return tuple(item.lower() for item in items if item)


#: A parsed configuration value: what each ConfigKey type parses to.
ConfigValue: TypeAlias = bool | int | float | str | tuple[str, ...]

_PARSERS: dict[str, Callable[[str, object], ConfigValue]] = {
    "bool": parse_bool,
    "int": parse_int,
    "long": parse_int,
    "double": parse_float,
    "string": _parse_string,
    "list": _parse_list,
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One documented configuration key."""

    name: str
    """Kafka's property name, e.g. ``segment.bytes``."""
    type: str
    """One of bool, int, long, double, string, list."""
    default: Any
    """Kafka's default value (already parsed)."""
    doc: str
    """One line saying what the key controls."""
    minimum: float | None = None
    """Smallest legal value for numeric keys."""
    maximum: float | None = None
    """Largest legal value for numeric keys."""
    choices: tuple[str, ...] | None = None
    """Legal values for string keys (compared lower-cased)."""

    def parse(self, raw: object) -> ConfigValue:
        """``raw`` (a Python value or its text) as this key's type, checked; ConfigError naming
        the key."""
        value = _PARSERS[self.type](self.name, raw)
        if self.type in ("int", "long", "double"):
            assert isinstance(value, (int, float))  # what the numeric parsers return
            upper = self.maximum if self.maximum is not None else (
                INT_MAX if self.type == "int" else LONG_MAX
            )
            if self.minimum is not None and value < self.minimum:
                raise ConfigError(self.name, f"{value} is below the minimum {self.minimum:g}")
            if value > upper:
                raise ConfigError(self.name, f"{value} is above the maximum {upper:g}")
        if self.choices is not None:
            items = value if isinstance(value, tuple) else (str(value),)  # a string key's
            for item in items:
                if item.lower() not in self.choices:
                    raise ConfigError(
                        self.name, f"{item!r} is not one of {', '.join(self.choices)}"
                    )
        return value


_COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")

#: Kafka's topic-level configuration keys, with Kafka's defaults.
TOPIC_CONFIG_KEYS: Mapping[str, ConfigKey] = MappingProxyType({
    key.name: key
    for key in (
        ConfigKey("segment.bytes", "int", 1 << 30, "Roll the active segment at this size.", 14),
        ConfigKey("segment.ms", "long", 604_800_000, "Roll the active segment after this age.", 1),
        ConfigKey("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms.", 0),
        ConfigKey("segment.index.bytes", "int", 10 * 1024 * 1024,
                  "Preallocated size of each offset and time index.", 4),
        ConfigKey("index.interval.bytes", "int", 4096,
                  "Bytes of batches between two sparse index entries.", 0),
        ConfigKey("flush.messages", "long", LONG_MAX,
                  "Force an fsync after this many messages (default: never).", 1),
        ConfigKey("flush.ms", "long", LONG_MAX,
                  "Force an fsync after this many ms (default: never).", 0),
        ConfigKey("retention.ms", "long", 604_800_000,
                  "Delete segments older than this (-1: forever).", -1),
        ConfigKey("retention.bytes", "long", -1,
                  "Delete old segments beyond this partition size (-1: no limit).", -1),
        ConfigKey("local.retention.ms", "long", -2,
                  "Local retention when tiered (-2: use retention.ms).", -2),
        ConfigKey("local.retention.bytes", "long", -2,
                  "Local retention by size when tiered (-2: use retention.bytes).", -2),
        ConfigKey("max.message.bytes", "int", 1_048_588, "Largest record batch accepted.", 0),
        ConfigKey("message.timestamp.type", "string", "CreateTime",
                  "CreateTime or LogAppendTime.", choices=("createtime", "logappendtime")),
        ConfigKey("message.timestamp.before.max.ms", "long", LONG_MAX,
                  "Reject batches whose timestamp is this far in the past.", 0),
        ConfigKey("message.timestamp.after.max.ms", "long", LONG_MAX,
                  "Reject batches whose timestamp is this far in the future.", 0),
        ConfigKey("compression.type", "string", "producer",
                  "Final compression of the topic (producer keeps the producer's codec).",
                  choices=_COMPRESSION_TYPES),
        ConfigKey("cleanup.policy", "list", ("delete",),
                  "Comma-separated cleanup policies (delete, compact, or plugins)."),
        ConfigKey("delete.retention.ms", "long", 86_400_000,
                  "How long tombstones are kept after compaction.", 0),
        ConfigKey("min.compaction.lag.ms", "long", 0,
                  "Minimum age before a record may be compacted.", 0),
        ConfigKey("max.compaction.lag.ms", "long", LONG_MAX,
                  "Maximum time a record stays uncompacted.", 1),
        ConfigKey("min.cleanable.dirty.ratio", "double", 0.5,
                  "Dirty ratio that makes a log eligible for cleaning.", 0, 1),
        ConfigKey("file.delete.delay.ms", "long", 60_000,
                  "Delay before a .deleted file is removed.", 0),
        ConfigKey("preallocate", "bool", False, "Preallocate segment files at roll."),
        ConfigKey("remote.storage.enable", "bool", False, "Tier this topic's closed segments."),
        ConfigKey("remote.log.tail.ms", "long", -1,
                  "tierlog's own: publish the flushed data below the high watermark that is "
                  "not in a tiered segment yet to the tier at most this often (-1: off).", -1),
        ConfigKey("remote.log.table.enable", "bool", False,
                  "tierlog's own: keep the tiered records as an Iceberg table in the tier as "
                  "well (needs remote.storage.enable)."),
        ConfigKey("remote.log.table.compaction.enable", "bool", False,
                  "tierlog's own: the tiering run merges the table's small files of "
                  "consecutive segments into run files (needs remote.log.table.enable)."),
        ConfigKey("remote.log.table.compaction.target.bytes", "long", 536_870_912,
                  "tierlog's own: the size a compaction's run file grows to (the table's "
                  "property write.target-file-size-bytes wins when set).", 1 << 20),
        ConfigKey("remote.log.table.compaction.max.links", "int", 16,
                  "tierlog's own: the most segments one run file merges (bounds the rewrite "
                  "when retention or DeleteRecords moves the start inside it).", 2, 1000),
        ConfigKey("remote.log.table.compaction.interval.ms", "long", 3_600_000,
                  "tierlog's own: the least time between two compactions of one partition's "
                  "table files by the tiering run (each merges at most one run).", 0),
        ConfigKey("remote.log.table.orphan.grace.ms", "long", 86_400_000,
                  "tierlog's own: how long a table's unreferenced files are kept before the "
                  "sweep deletes them (bounds how long a planned read may use an old "
                  "snapshot).", 0),
        ConfigKey("remote.log.table.snapshot.retention.ms", "long", 3_600_000,
                  "tierlog's own: table snapshots older than this are expired (the current "
                  "one is always kept).", 0),
        ConfigKey("min.insync.replicas", "int", 1, "Accepted for compatibility.", 1),
        ConfigKey("unclean.leader.election.enable", "bool", False,
                  "Accepted for compatibility."),
        ConfigKey("message.downconversion.enable", "bool", True, "Accepted for compatibility."),
        ConfigKey("record.validation", "string", "full",
                  "full (check every record's framing and offset delta, as a Kafka broker "
                  "does) or crc (trust a batch whose CRC matches: faster, for trusted "
                  "producers only).",
                  choices=("full", "crc")),
    )
})


#: The prefix of a topic table's catalog properties, ``remote.log.table.catalog.<property>``:
#: passed through to pyiceberg's ``load_catalog`` (none set: the tier's own catalog).
TABLE_CATALOG_PREFIX = "remote.log.table.catalog."


def topic_config_key(name: str) -> ConfigKey | None:
    """The topic config key named ``name``: one of TOPIC_CONFIG_KEYS, or a table catalog
    property (a string, passed through); None for an unknown name."""
    key = TOPIC_CONFIG_KEYS.get(name)
    if key is None and name.startswith(TABLE_CATALOG_PREFIX):
        return ConfigKey(name, "string", None,
                         "tierlog's own: a property of the topic table's catalog.")
    return key


def is_sensitive_config(name: str) -> bool:
    """Whether a topic config holds a credential (a catalog's secret key, token, password):
    never logged or shown; DescribeConfigs answers null for it, as Kafka does for passwords."""
    return name.startswith(TABLE_CATALOG_PREFIX) and is_secret(name[len(TABLE_CATALOG_PREFIX):])


def _parse_override(name: str, raw: object) -> ConfigValue:
    key = topic_config_key(name)
    if key is None:
        raise ConfigError(name, "unknown topic configuration key")
    if key.name in TOPIC_CONFIG_KEYS:
        return key.parse(raw)
    if name == TABLE_CATALOG_PREFIX:
        raise ConfigError(name, "a catalog property name must follow the prefix")
    if not isinstance(raw, str):  # the value is not shown: it may be a secret
        raise ConfigError(name, f"expected a string, got a {type(raw).__name__}")
    return raw.strip()


def check_topic_config(config: LogConfig) -> None:
    """The rules between keys that only a topic's effective config (its overrides over the
    broker's topic defaults) can check, as Kafka's LogConfig.validate does at creation and
    alter; ConfigError naming the keys."""
    if config["remote.log.table.enable"] and not config["remote.storage.enable"]:
        raise ConfigError("remote.log.table.enable",
                          "true needs remote.storage.enable=true: the table is kept in the "
                          "remote tier")
    if config["remote.log.table.compaction.enable"] and not config["remote.log.table.enable"]:
        raise ConfigError("remote.log.table.compaction.enable",
                          "true needs remote.log.table.enable=true: it compacts the topic's "
                          "table")


class LogConfig(Mapping[str, Any]):
    """An immutable, validated set of topic-level settings.

    ``LogConfig({"segment.bytes": 1 << 20})`` overrides Kafka's defaults; unknown keys and
    bad values raise :class:`~tierlog.errors.ConfigError` naming the key. Read a value as
    ``config["segment.bytes"]`` or ``config.segment_bytes``.
    """

    __slots__ = ("_overrides", "_values")

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        overrides = dict(overrides or {})
        values = {name: key.default for name, key in TOPIC_CONFIG_KEYS.items()}
        parsed = {name: _parse_override(name, raw) for name, raw in overrides.items()}
        values.update(parsed)
        self._values: Mapping[str, Any] = MappingProxyType(values)
        self._overrides: Mapping[str, Any] = MappingProxyType(parsed)
        self._check_consistency()

    def _check_consistency(self) -> None:
        if self["segment.jitter.ms"] > self["segment.ms"]:
            raise ConfigError("segment.jitter.ms", "must not exceed segment.ms")
        if self["segment.index.bytes"] < 12:
            raise ConfigError("segment.index.bytes", "must hold at least one time index entry")

    def __getitem__(self, name: str) -> Any:  # noqa: ANN401 - its type is the key's (int...)
        try:
            return self._values[name]
        except KeyError:
            raise ConfigError(name, "unknown topic configuration key") from None

    def __getattr__(self, attr: str) -> Any:  # noqa: ANN401 - as __getitem__
        name = attr.replace("_", ".")
        if name in TOPIC_CONFIG_KEYS:
            return self._values[name]
        raise AttributeError(attr)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: MASK if is_sensitive_config(k) else v for k, v in self._overrides.items()}
        return f"LogConfig({shown!r})"

    @property
    def overrides(self) -> Mapping[str, Any]:
        """Only the keys set explicitly (what a topic persists as its overrides)."""
        return self._overrides

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        """A new config with these keys changed on top of this one's overrides."""
        return LogConfig({**self._overrides, **overrides})

    @property
    def table_catalog_properties(self) -> dict[str, str]:
        """The topic table's catalog properties, ``remote.log.table.catalog.`` removed (empty:
        the tier's own catalog)."""
        return {k[len(TABLE_CATALOG_PREFIX):]: v for k, v in self._values.items()
                if k.startswith(TABLE_CATALOG_PREFIX)}

    @property
    def is_log_append_time(self) -> bool:
        timestamp_type: str = self["message.timestamp.type"]
        return timestamp_type.lower() == "logappendtime"
