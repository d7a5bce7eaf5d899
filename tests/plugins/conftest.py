"""The plugins room (the plugin host, index plugins, metrics, third-party remote storage): the
third-party example plugin (examples/plugin-key-index) pip-installed into a scratch site
(``plugin_site``) and a ``host`` that discovered it through its entry point, shared by the key
index's tests (test_plugin_key_index.py, test_compaction_plugin_index.py;
test_plugin_builtin_indexes.py overrides ``host`` with its own); ``manager``
(configured by the module's ``MANAGER_CONFIG``) and the fake ``clock`` come from
tests/conftest.py, and the test plugins live in tests/support/plugins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.plugin_manager import PluginHost

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin-key-index"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """A site directory holding the example plugin, pip-installed (once per module)."""
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(EXAMPLE)],
        check=True, capture_output=True, text=True,
    )
    assert (site / "tierlog_key_index-0.1.0.dist-info" / "entry_points.txt").exists()
    return site


@pytest.fixture
def host(plugin_site, monkeypatch):
    """A PluginHost that discovered the example plugin through its entry point."""
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.delenv("TIERLOG_LOAD_PLUGINS", raising=False)
    return PluginHost()
