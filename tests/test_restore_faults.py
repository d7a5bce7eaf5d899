"""A restore whose tier fails while it is being cut (a real ``faultfs://`` tier that refuses
writes): the restore is undone locally, the tier keeps every segment committed, and the same
restore run again once the tier heals gives the same cut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest
from fault_fs import fault_storage
from test_restore import lose_disks_after, raw_batches

from tierlog.errors import TierlogError
from tierlog.manager import LogManager
from tierlog.remote.api import RemoteLogSegmentState
from tierlog.remote.manifest import list_remote_partitions, read_partition_manifest


def committed(url: str) -> list[tuple[int, int]]:
    """The tier's committed segments of orders-0, read with nothing but fsspec."""
    fs, root = fsspec.core.url_to_fs(url)
    (tip,) = [p for p in list_remote_partitions(fs, root) if p.topic == "orders"]
    manifest = read_partition_manifest(fs, root, tip)
    assert {m.state for m in manifest.segments} == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
    return [(m.start_offset, m.end_offset) for m in manifest.committed]


def test_a_tier_failing_during_the_cut_undoes_the_restore(tmp_path: Path, clock: Any) -> None:
    url = f"faultfs://{tmp_path}/tier"
    config = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
              "remote.storage.manager": "fsspec",
              "remote.storage.url": url}
    with fault_storage() as faults:
        source = lose_disks_after(tmp_path, config, clock)
        cut = source.marks["after-marker"]
        with LogManager.open(source.data, config, time_ms=clock,
                             start_scheduler=False) as mgr:
            before = committed(url)
            for method in ("pipe_file", "put_file"):  # every write to the tier fails
                faults.fail(method)
            with pytest.raises((TierlogError, OSError)) as failed:
                mgr.restore_topic("orders", to_offset=cut)
            assert any(entry.name == "cut_tier" for entry in failed.traceback)
            faults.heal()
            assert mgr.partitions("orders") == []
            assert not list(source.data.glob("orders-*"))
            assert committed(url) == before  # nothing taken out of the tier
            (log,) = mgr.restore_topic("orders", to_offset=cut)
            assert log.log_end_offset == cut
            assert raw_batches(log, 0, cut) == [b for b in source.batches
                                                if int.from_bytes(b[:8], "big") < cut]
            assert max(end for _, end in committed(url)) < cut
