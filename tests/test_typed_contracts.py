"""The typed contracts between layers hold for the real parts at run time, not only for mypy:
a tiered Log offers everything TieredLog names (what the remote layer uses of it), and the
registries hand out cleanup policies and remote storage factories that do what their types
say."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tierlog.contracts.cleanup_policy import CleanupResult
from tierlog.manager.log_manager import LogManager
from tierlog.plugin_manager import get_plugins
from tierlog.remote.api import RemoteStorageManager
from tierlog.remote.log_protocol import TieredLog
from tierlog.remote.rlm.remote_reader import RemoteLogReader

_MEMBERS = sorted(n for n in vars(TieredLog) if not n.startswith("_"))


def test_the_protocol_names_what_the_remote_layer_uses() -> None:
    assert {"directory", "segments", "leader_epoch_cache", "producer_state", "attach_remote",
            "maybe_increment_log_start_offset"} <= set(_MEMBERS)


@pytest.mark.parametrize("member", _MEMBERS)
def test_a_tiered_log_has_every_member_of_tiered_log(tmp_path: Path, clock,
                                                      member: str) -> None:
    config = {"remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": f"file://{tmp_path}/tier"}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("t", 1)
        assert isinstance(log.remote, RemoteLogReader)  # attached through TieredLog
        value = getattr(log, member)
        declared = vars(TieredLog)[member]
        if isinstance(declared, property):
            annotation = inspect.get_annotations(declared.fget)["return"]
            if annotation == "int":
                assert isinstance(value, int)
            elif annotation == "str":
                assert isinstance(value, str)
            elif annotation == "Path":
                assert isinstance(value, Path)
        else:
            assert callable(value)
            assert (list(inspect.signature(value).parameters)
                    == list(inspect.signature(declared).parameters)[1:])


def test_registered_cleanup_policies_clean_and_report(tmp_path: Path, clock) -> None:
    registries = get_plugins().registries
    with LogManager.open(tmp_path / "data", {}, time_ms=clock, start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("t", 1)
        for name in ("delete", "compact"):
            result = registries.cleanup_policy(name).clean(log, clock())
            assert isinstance(result, CleanupResult)


def test_registered_remote_storage_factories_build_a_remote_storage_manager(
        tmp_path: Path) -> None:
    factory = get_plugins().registries.remote_storage_factory("local")
    rsm = factory(f"file://{tmp_path}/tier", {})
    try:
        assert isinstance(rsm, RemoteStorageManager)
    finally:
        rsm.close()
