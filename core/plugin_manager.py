"""The plugin manager: built-in plugins and entry-point plugins, loaded once, lazily.

Registries built from the registration hooks are read-only mappings. A plugin that fails to
import is reported with its distribution and error, and the others still load.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from tierlog import hookspecs
from tierlog.errors import PluginError
from tierlog.events import EventDelivery

if TYPE_CHECKING:
    # Only for the registries' types: the contracts, which sit beside the plugin host.
    from tierlog.contracts.cleanup_policy import CleanupPolicy
    from tierlog.contracts.remote_metadata import RemoteLogMetadataFactory
    from tierlog.contracts.remote_storage import RemoteStorageFactory
    from tierlog.contracts.segment_index import SegmentIndexType

_V = TypeVar("_V")

log = logging.getLogger(__name__)

#: Entry-point group that third-party (and built-in) plugins register under.
ENTRY_POINT_GROUP = "tierlog"
#: Comma-separated entry-point names to load; unset loads all, empty loads none.
LOAD_PLUGINS_ENV = "TIERLOG_LOAD_PLUGINS"

#: Built-in plugins: registered even when the entry points are narrowed or not installed.
DEFAULT_PLUGINS = (
    "tierlog.index.plugin",
    "tierlog.cleaner.plugin",
    "tierlog.plugins.local.plugin",
    "tierlog.plugins.s3.plugin",
    "tierlog.remote.metadata.metadata_plugin",
)


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin that could not be loaded, and why."""

    name: str
    distribution: str
    error: str


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One registered plugin: its name, where it comes from and the hooks it implements."""

    name: str
    distribution: str
    hooks: tuple[str, ...]


class Registries:
    """Read-only registries built once from the registration hooks.

    A registration hook that raises is recorded in ``failures`` (plugin name and error) and
    the other plugins' registrations still count.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.failures: list[tuple[str, str]] = []
        self.index_types: Mapping[str, SegmentIndexType] = self._collect(
            pm.hook.tierlog_register_index_types, lambda t: (t.name, t), "index type")
        # A policy of any log: the host names nothing of the engine (the LogManager passes a Log).
        self.cleanup_policies: Mapping[str, CleanupPolicy[Any]] = self._collect(
            pm.hook.tierlog_register_cleanup_policies, None, "cleanup policy")
        self.remote_storage: Mapping[str, RemoteStorageFactory] = self._collect(
            pm.hook.tierlog_register_remote_storage, None, "remote storage")
        self.remote_metadata_managers: Mapping[str, RemoteLogMetadataFactory] = self._collect(
            pm.hook.tierlog_register_remote_metadata_managers, None, "remote metadata manager")

    def _collect(
        self, hook: pluggy.HookCaller, key: Callable[[_V], tuple[str, _V]] | None, what: str
    ) -> Mapping[str, _V]:
        """What the registration ``hook``'s implementations register, by name: ``register(value)``
        named by ``key(value)``, or ``register(name, value)`` when ``key`` is None."""
        found: dict[str, _V] = {}

        def register(*args: Any) -> None:  # noqa: ANN401 - a plugin's (value) or (name, value)
            name, value = key(args[0]) if key is not None else (args[0], args[1])
            if name in found and found[name] is not value:
                log.info("%s %r registered again; the later registration wins", what, name)
            found[name] = value

        # pluggy lists implementations oldest-registered first: later registrations win.
        for impl in hook.get_hookimpls():
            try:
                impl.function(register=register)
            except Exception as exc:  # noqa: BLE001 - isolate a broken plugin
                error = f"{type(exc).__name__}: {exc}"
                self.failures.append((impl.plugin_name, error))
                log.error("plugin %s failed to register its %s: %s", impl.plugin_name, what, error)
        return MappingProxyType(found)

    def cleanup_policy(self, name: str) -> CleanupPolicy[Any]:
        try:
            return self.cleanup_policies[name]
        except KeyError:
            raise PluginError(
                f"no cleanup policy named {name!r}; known: {', '.join(sorted(self.cleanup_policies))}"
            ) from None

    def remote_storage_factory(self, name: str) -> RemoteStorageFactory:
        try:
            return self.remote_storage[name]
        except KeyError:
            raise PluginError(
                f"no remote storage manager named {name!r}; known: "
                f"{', '.join(sorted(self.remote_storage))}"
            ) from None

    def remote_metadata_manager_factory(self, name: str) -> RemoteLogMetadataFactory:
        try:
            return self.remote_metadata_managers[name]
        except KeyError:
            raise PluginError(
                f"no remote log metadata manager named {name!r}; known: "
                f"{', '.join(sorted(self.remote_metadata_managers))}"
            ) from None


class PluginHost:
    """Owns the pluggy PluginManager and what it loaded. Use :func:`get_plugins`."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.failures: list[PluginFailure] = []
        self._dists: dict[str, str] = {}
        if load_entry_points:
            self._load_entry_points()
        for module_name in DEFAULT_PLUGINS:
            self._register_module(module_name, "tierlog (built-in)")
        self.registries = Registries(self.pm)
        self._record_registry_failures()
        #: Isolated, rate-limited delivery of lifecycle events to every plugin.
        self.events = EventDelivery(self.pm)

    def _record_registry_failures(self) -> None:
        for name, error in self.registries.failures:
            self.failures.append(PluginFailure(name, self._dists.get(name, "unknown"), error))

    @property
    def hook(self) -> pluggy.HookRelay:
        return self.pm.hook

    def _load_entry_points(self) -> None:
        wanted_env = os.environ.get(LOAD_PLUGINS_ENV)
        wanted = None if wanted_env is None else {n.strip() for n in wanted_env.split(",") if n.strip()}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if wanted is not None and ep.name not in wanted:
                continue
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown"
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 - one bad plugin must not stop the others
                failure = PluginFailure(ep.name, dist, f"{type(exc).__name__}: {exc}")
                self.failures.append(failure)
                log.error("tierlog plugin %r from %s failed to load: %s", ep.name, dist,
                          failure.error)
                continue
            if self.pm.is_registered(plugin):
                continue
            self.pm.register(plugin, name=ep.name)
            self._dists[ep.name] = dist

    def _register_module(self, module_name: str, dist: str) -> None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            self.failures.append(PluginFailure(module_name, dist, f"ImportError: {exc}"))
            log.error("built-in plugin %s failed to load: %s", module_name, exc)
            return
        if not self.pm.is_registered(module):
            self.pm.register(module, name=module_name)
            self._dists[module_name] = dist

    def register(self, plugin: object, name: str, distribution: str = "registered at runtime") -> None:
        """Register a plugin object (tests, embedding applications) and rebuild the registries."""
        self.pm.register(plugin, name=name)
        self._dists[name] = distribution
        self.registries = Registries(self.pm)
        self._record_registry_failures()

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self._dists.pop(name, None)
        self.registries = Registries(self.pm)

    def plugins(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution and hook implementations."""
        out = []
        for name, plugin in self.pm.list_name_plugin():
            hooks = tuple(sorted(
                caller.name for caller in self.pm.get_hookcallers(plugin) or ()
            ))
            out.append(PluginInfo(name, self._dists.get(name, "unknown"), hooks))
        return sorted(out, key=lambda p: p.name)


_host: PluginHost | None = None
_host_lock = threading.Lock()


def get_plugins() -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _host
    with _host_lock:
        if _host is None:
            _host = PluginHost()
        return _host


def reset_plugins() -> None:
    """Forget the loaded plugins (the next :func:`get_plugins` loads them again)."""
    global _host
    with _host_lock:
        _host = None
