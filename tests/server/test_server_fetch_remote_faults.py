"""A fetch of tiered offsets while the tier is hung or over its quota is answered as Kafka
answers it: the partition comes back empty with no error (the client fetches again), its
offsets still reported, and the partitions read locally are not held up."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.errors import CopyLagExceededError, RemoteFetchTimeoutError
from tierlog.manager.log_manager import LogManager
from tierlog.server.api.fetch import read_partitions
from tierlog.server.api.fetch_sessions import FetchSessionCache
from tierlog.server.error_codes import error_code_for

STEP_S = 10


def _config(tmp_path: Path) -> dict[str, Any]:
    return {"segment.bytes": 4096, "remote.storage.enable": True,
            "remote.storage.manager": "fsspec",
            "remote.storage.url": f"faultfs://{tmp_path}/tier", "local.retention.bytes": 0,
            "remote.storage.request.timeout.ms": 1500, "remote.fetch.max.wait.ms": 200}


def test_a_hung_tier_answers_the_tiered_partition_empty_and_the_local_one_with_data(
        tmp_path: Path, clock: Any) -> None:
    with fault_storage() as faults, ThreadPoolExecutor(2) as helper, LogManager.open(
            tmp_path / "data", _config(tmp_path), time_ms=clock, start_scheduler=False) as mgr:
        tiered, local = mgr.create_topic("orders", 2)
        for i in range(20):
            tiered.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])
        local.append_records([Record(value=b"local")])
        mgr.tier_now()
        assert tiered.local_log_start_offset > 0
        fetch = FetchSessionCache().context(
            0, -1, [(("orders", 0), 0, 1 << 20), (("orders", 1), 0, 1 << 20)], [])
        hang = faults.hang("cat_file")
        reads = helper.submit(read_partitions, mgr, fetch, "read_uncommitted",
                              1 << 20).result(STEP_S)
        assert hang.wait_entered(0)
        by_partition = {r.tp[1]: r for r in reads}
        assert by_partition[0].error == ErrorCode.none
        assert by_partition[0].size == 0
        assert by_partition[0].high_watermark == tiered.high_watermark
        assert by_partition[1].error == ErrorCode.none and by_partition[1].size > 0
        faults.heal()
        reads = read_partitions(mgr, fetch, "read_uncommitted", 1 << 20)
        assert reads[0].size > 0  # once the tier answers, the same fetch reads it


def test_retriable_engine_errors_map_to_retriable_kafka_codes() -> None:
    assert error_code_for(CopyLagExceededError("orders-0: 5 MiB not yet copied")) == \
        ErrorCode.kafka_storage_error
    assert error_code_for(RemoteFetchTimeoutError("orders-0: read of offset 0")) == \
        ErrorCode.request_timed_out
