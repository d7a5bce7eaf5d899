"""The plugin framework: built-ins, entry-point discovery, failure isolation, narrowing."""

from __future__ import annotations

import inspect
import textwrap

import pytest
from support.plugins.audit import AuditPlugin

from tierlog import hookspecs
from tierlog.errors import PluginError
from tierlog.plugin_manager import LOAD_PLUGINS_ENV, PluginHost


def _fake_distribution(root, name, entry_points, modules):
    """A minimal installed distribution: NAME-1.0.dist-info with entry_points.txt, plus modules."""
    dist = root / f"{name.replace('-', '_')}-1.0.dist-info"  # as a wheel names it
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (dist / "entry_points.txt").write_text(f"[tierlog]\n{lines}\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


GOOD = """
from tierlog.hookspecs import hookimpl

class Policy:
    name = "fake-policy"
    def clean(self, log, now_ms):
        return None

@hookimpl
def tierlog_register_cleanup_policies(register):
    register("fake-policy", Policy())
"""

BAD = """
raise ImportError("this plugin needs libfoo")
"""


@pytest.fixture
def fake_plugins(tmp_path, monkeypatch):
    _fake_distribution(tmp_path, "tierlog-fake-good", {"fakegood": "fake_good_plugin"},
                       {"fake_good_plugin": GOOD})
    _fake_distribution(tmp_path, "tierlog-fake-bad", {"fakebad": "fake_bad_plugin"},
                       {"fake_bad_plugin": BAD})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(LOAD_PLUGINS_ENV, raising=False)
    return tmp_path


def test_builtins_are_registered():
    host = PluginHost(load_entry_points=False)
    registries = host.registries
    assert {"offset", "time", "transaction"} <= set(registries.index_types)
    assert registries.index_types["offset"].suffix == ".index"
    assert registries.index_types["transaction"].uploaded_to_remote
    assert {"delete", "compact"} <= set(registries.cleanup_policies)
    assert {"local", "s3"} <= set(registries.remote_storage)
    assert host.failures == []


def test_entry_point_plugins_load_and_a_broken_one_is_reported(fake_plugins, caplog):
    host = PluginHost()
    assert "fake-policy" in host.registries.cleanup_policies
    failures = {f.name: f for f in host.failures}
    assert set(failures) == {"fakebad"}
    assert failures["fakebad"].distribution == "tierlog-fake-bad 1.0"
    assert "needs libfoo" in failures["fakebad"].error
    assert "fakebad" in caplog.text and "tierlog-fake-bad" in caplog.text
    listed = {p.name: p for p in host.plugins()}
    assert listed["fakegood"].distribution == "tierlog-fake-good 1.0"
    assert listed["fakegood"].hooks == ("tierlog_register_cleanup_policies",)
    # Built-ins still load alongside.
    assert "delete" in host.registries.cleanup_policies


def test_tierlog_load_plugins_narrows_the_entry_points(fake_plugins, monkeypatch):
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "fakegood")
    host = PluginHost()
    assert host.failures == []
    assert "fake-policy" in host.registries.cleanup_policies
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "")
    host = PluginHost()
    assert "fake-policy" not in host.registries.cleanup_policies
    assert "delete" in host.registries.cleanup_policies  # built-ins never depend on it


def test_runtime_registration_and_lookup_errors():
    host = PluginHost(load_entry_points=False)
    plugin = AuditPlugin()
    host.register(plugin, name="audit")
    try:
        assert "noop" in host.registries.cleanup_policies
        assert host.registries.cleanup_policy("noop").name == "noop"
    finally:
        host.unregister("audit")
    assert "noop" not in host.registries.cleanup_policies
    with pytest.raises(PluginError, match="no cleanup policy named 'noop'"):
        host.registries.cleanup_policy("noop")
    with pytest.raises(PluginError, match="no remote storage manager named 'ftp'"):
        host.registries.remote_storage_factory("ftp")


def test_every_hook_is_documented_and_named_by_convention():
    specs = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
             if hasattr(fn, "tierlog_spec")]
    assert len(specs) >= 7
    for name in specs:
        assert name.startswith("tierlog_")
        doc = inspect.getdoc(getattr(hookspecs, name))
        assert doc and "Called" in doc, f"{name} must say when it is called"
