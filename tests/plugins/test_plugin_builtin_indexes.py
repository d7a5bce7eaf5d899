"""Built-in index types are used through the registry a plugin uses: a plugin registering
"offset" replaces the built-in in every segment (appends, reads, recovery), the plain appender
is not armed then, and a replacement that cannot serve the role is refused clearly."""

from __future__ import annotations

import pluggy
import pytest
from support.plugins.counting_index import (
    CountingIndexPlugin,
    CountingOffsetIndex,
    CountingOffsetIndexType,
)

from tierlog import Log, Record, hookspecs
from tierlog.errors import PluginError
from tierlog.hookspecs import hookimpl
from tierlog.index import OffsetIndex
from tierlog.index import plugin as index_plugin
from tierlog.index.index_types import (
    BUILTIN_INDEX_TYPES,
    DEFAULT_INDEX_TYPES,
    OFFSET_INDEX,
    resolve_index_types,
)
from tierlog.plugin_manager import PluginHost, Registries

CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 100}


@pytest.fixture
def host():
    host = PluginHost(load_entry_points=False)
    host.register(CountingIndexPlugin(), name="counting")
    CountingOffsetIndex.appends = CountingOffsetIndex.lookups = 0
    return host


def _fill(log: Log, count: int = 120) -> None:
    for i in range(count):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 90)], leader_epoch=0)


def test_the_replacement_opens_every_segment_and_sees_appends_and_lookups(host, tmp_path, clock):
    log = Log.open(tmp_path / "t-0", CONFIG, plugins=host, time_ms=clock)
    _fill(log)
    segments = log.segments.values()
    assert len(segments) > 2
    assert all(type(s.offset_index) is CountingOffsetIndex for s in segments)
    assert log._plain_appender is None  # nothing bypasses the replacement
    appended = CountingOffsetIndex.appends
    assert appended > 0
    records = list(log.read(57, 200).records())
    assert records[0].offset == 57 and records[0].key == b"k57"
    assert CountingOffsetIndex.lookups > 0
    _fill(log, 40)
    assert CountingOffsetIndex.appends > appended  # every append went through the index
    log.close()


def test_recovery_rebuilds_through_the_replacement(host, tmp_path, clock):
    log = Log.open(tmp_path / "t-0", CONFIG, plugins=host, time_ms=clock)
    _fill(log)
    end = log.log_end_offset
    log.flush()
    for path in (tmp_path / "t-0").glob("*.index"):
        path.write_bytes(b"\x00" * 5)  # damaged: recovery must rebuild it
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, plugins=host, time_ms=clock)
    assert reopened.log_end_offset == end
    assert all(type(s.offset_index) is CountingOffsetIndex for s in reopened.segments.values())
    assert [r.offset for r in reopened.read(100, 4000).records()][:3] == [100, 101, 102]
    reopened.close()


def test_without_a_replacement_the_builtins_serve_and_the_plain_appender_arms(tmp_path, clock):
    host = PluginHost(load_entry_points=False)
    assert resolve_index_types(host.registries.index_types, None) == DEFAULT_INDEX_TYPES
    log = Log.open(tmp_path / "t-0", CONFIG, plugins=host, time_ms=clock)
    _fill(log, 10)
    assert type(log.segments.active.offset_index) is OffsetIndex
    assert log._plain_appender is not None
    log.close()


def test_a_plugin_registered_before_the_builtins_still_replaces_them():
    # Entry-point plugins are registered before the built-in modules: the built-ins
    # register first (trylast) so the plugin's registration wins either way.
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(CountingIndexPlugin(), name="counting")
    pm.register(index_plugin, name="tierlog.index.plugin")
    types = Registries(pm).index_types
    assert isinstance(types["offset"], CountingOffsetIndexType)
    assert types["time"] is BUILTIN_INDEX_TYPES["time"]
    resolved = resolve_index_types(types, None)
    assert resolved.replaced and resolved.offset is types["offset"] and not resolved.extras


class _WrongSuffix(CountingOffsetIndexType):
    suffix = ".idx"


class _NotAnOffsetIndex(CountingOffsetIndexType):
    def open(self, path, base_offset, config, *, max_index_size=None):
        return object()


def test_a_replacement_that_changes_the_suffix_is_refused():
    with pytest.raises(PluginError, match=r"'offset'.*'\.idx'.*'\.index'"):
        resolve_index_types({"offset": _WrongSuffix()}, None)


def test_a_replacement_that_is_not_a_subclass_is_refused_and_leaves_no_files(tmp_path, clock):
    class Plugin:
        @hookimpl
        def tierlog_register_index_types(self, register):
            register(_NotAnOffsetIndex())

    host = PluginHost(load_entry_points=False)
    host.register(Plugin(), name="bad")
    with pytest.raises(PluginError, match=r"'offset'.*not a OffsetIndex"):
        Log.open(tmp_path / "t-0", CONFIG, plugins=host, time_ms=clock)
    assert not list((tmp_path / "t-0").glob("*.log"))


@pytest.mark.parametrize("name", sorted(BUILTIN_INDEX_TYPES))
def test_each_builtin_type_opens_its_class(tmp_path, name):
    builtin = BUILTIN_INDEX_TYPES[name]
    index = builtin.open(tmp_path / f"0{builtin.suffix}", 0, {"segment.index.bytes": 1024})
    try:
        assert type(index) is builtin.index_class
    finally:
        index.close()
    assert OFFSET_INDEX.name == "offset"
