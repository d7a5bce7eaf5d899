"""Per-record codec throughput: tierlog (C and pure Python) against kafka-python and aiokafka.

Issue targets, on 10 K records of 100-byte values with keys like b"key-123", no headers and
increasing timestamps: decoding >= 4x and encoding >= 3x kafka-python 3.0.12's pure-Python
DefaultRecordBatch iteration / DefaultRecordBatchBuilder append loop + build().
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from _util import best_of, report
from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from aiokafka.record._crecords import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBuilder

from tierlog.records import Record, RecordBatch, build_batch
from tierlog.records._codec import ACCELERATED, PURE_PYTHON_ENV

RECORDS = 10_000
VALUE_SIZE = 100
REPEATS = 15
BASE_TS = 1_700_000_000_000
BATCH_SIZE = 1 << 30  # large enough that the builders never refuse a record
#: Flag for the child process that measures the pure-Python codec.
JSON_FLAG = "--tierlog-json"


def workload() -> list[tuple[bytes, bytes, int]]:
    value = bytes(range(VALUE_SIZE))
    return [(b"key-%d" % i, value, BASE_TS + i) for i in range(RECORDS)]


def touch_all(records) -> None:  # type: ignore[no-untyped-def]
    """Read every field of every record, as an application iterating a fetch would."""
    for r in records:
        r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018


def kafka_python_encode(rows: Sequence[tuple[bytes, bytes, int]]) -> bytes:
    builder = KafkaBuilder(2, 0, 0, -1, -1, -1, BATCH_SIZE)
    for i, (key, value, ts) in enumerate(rows):
        builder.append(i, ts, key, value, [])
    return bytes(builder.build())


def aiokafka_encode(rows: Sequence[tuple[bytes, bytes, int]]) -> bytes:
    builder = AioBuilder(2, 0, 0, -1, -1, -1, BATCH_SIZE)
    for i, (key, value, ts) in enumerate(rows):
        builder.append(i, ts, key, value, [])
    return bytes(builder.build())


def rate(fn: Callable[[], object]) -> float:
    best, _ = best_of(fn, REPEATS)
    return RECORDS / best


def measure_tierlog(rows: Sequence[tuple[bytes, bytes, int]], batch: bytes) -> dict[str, float]:
    """Records/s of tierlog's public API with whichever codec this process selected."""
    records = [Record(key=k, value=v, timestamp=ts) for k, v, ts in rows]
    decoded = RecordBatch(batch).records()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decoded] == [
        (i, k, v, ts) for i, (k, v, ts) in enumerate(rows)
    ]
    assert build_batch(records, now_ms=BASE_TS)[61:] == batch[61:]
    return {
        "decode": rate(lambda: touch_all(RecordBatch(batch).records())),
        "encode": rate(lambda: build_batch(records, now_ms=BASE_TS)),
    }


def measure_pure_python() -> dict[str, float]:
    """Run this script again with TIERLOG_PURE_PYTHON=1: the codec is chosen at import."""
    env = dict(os.environ, **{PURE_PYTHON_ENV: "1"})
    out = subprocess.run(
        [sys.executable, __file__, JSON_FLAG], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def main() -> dict[str, float]:
    rows = workload()
    batch = kafka_python_encode(rows)
    if JSON_FLAG in sys.argv:
        print(json.dumps(measure_tierlog(rows, batch)))
        return {}
    if not ACCELERATED:
        print("warning: the C accelerator is not built; both tierlog rows use pure Python")
    assert aiokafka_encode(rows)[61:] == batch[61:]
    decode = {
        "kafka-python 3.0.12 (pure Python)": rate(lambda: touch_all(KafkaBatch(batch))),
        "aiokafka 0.14.0 (_crecords, compiled)": rate(lambda: touch_all(AioBatch(batch))),
    }
    encode = {
        "kafka-python 3.0.12 (pure Python)": rate(lambda: kafka_python_encode(rows)),
        "aiokafka 0.14.0 (_crecords, compiled)": rate(lambda: aiokafka_encode(rows)),
    }
    c = measure_tierlog(rows, batch)
    py = measure_pure_python()
    for table, key in ((decode, "decode"), (encode, "encode")):
        table["tierlog (C accelerator)"] = c[key]
        table["tierlog (pure Python)"] = py[key]
    results = {}
    for title, table, api, target in (
        ("decode", decode, "RecordBatch(buf).records() + read every field", 4),
        ("encode", encode, "build_batch(records), uncompressed", 3),
    ):
        baseline = table["kafka-python 3.0.12 (pure Python)"]
        report(
            f"{title}: {RECORDS:,} records, {VALUE_SIZE}-byte values, no headers, best of "
            f"{REPEATS}; tierlog via {api}",
            [(name, f"{r:>12,.0f} rec/s  {r / baseline:5.2f}x kafka-python") for name, r in
             table.items()],
        )
        results[f"{title}_c_vs_kafka_python"] = table["tierlog (C accelerator)"] / baseline
        results[f"{title}_py_vs_kafka_python"] = table["tierlog (pure Python)"] / baseline
        print(f"  target: tierlog (C) >= {target}x kafka-python")
    return results


if __name__ == "__main__":
    main()
