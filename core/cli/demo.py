"""``tierlog demo``: the end-to-end tour. Produce to a 3-partition topic (every codec, keys,
headers, transactions), roll segments, tier them, let local retention drop them, read old
offsets back from the remote tier, then query the tier with Spark SQL.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tierlog.cli._common import (
    DATA_DIR_CONFIG,
    CliError,
    Settings,
    Subcommands,
    human_bytes,
    plural,
    progress_bar,
    settings,
)
from tierlog.cli._tier_options import TierOptions, tier_options
from tierlog.cli.consume import iter_fetches
from tierlog.cli.demo_spark import run_spark_queries
from tierlog.cli.tier import errors_reported_once, print_tier_summary, tier_with_progress
from tierlog.common.atomic import atomic_write_text
from tierlog.common.clock import system_time_ms
from tierlog.common.partitioner import partition_for_key
from tierlog.common.properties import format_properties
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.rlm.remote_reader import topic_id_partition
from tierlog.remote.rlm.rlm import TierResult
from tierlog.remote.tier.layout import partition_dir_name, table_key
from tierlog.remote.tier.tail_manifest import read_tail_manifest

TOPIC = "demo"
PARTITIONS = 3
DEFAULT_DATA_DIR = "demo-data"
DEFAULT_RECORDS = 1_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BATCH_RECORDS = 500
#: An uncompressed demo record's size, bounding a batch so it fits a small segment.
MAX_RECORD_BYTES = 128
KEYS = 1000
#: The records' timestamps spread over this span, ending now.
SPAN_MS = 6 * 60_000
#: Written into the data dir; only a directory holding it (or empty) is wiped.
MARKER = ".tierlog-demo"
#: About how many bytes a record takes on disk, averaged over the codecs (sizes segments).
BYTES_PER_RECORD = 60
SEGMENTS_PER_PARTITION = 16
MIN_SEGMENT_BYTES = 64 * 1024
MAX_SEGMENT_BYTES = 1 << 20
ABORT_PRODUCER_ID = 4242
COMMIT_PRODUCER_ID = 4343


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "demo", parents=[common], help="run the end-to-end tiered storage demo",
        description=f"Create a {PARTITIONS}-partition topic in ./{DEFAULT_DATA_DIR} (wiped "
                    "first), produce records with every codec and two transactions (one "
                    "aborted), roll many segments, tier them to a remote tier, let local "
                    "retention remove most local segments, read old offsets back from the "
                    "remote tier, then count the tier's committed records with Spark SQL.")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                        help="records to produce (default: %(default)s)")
    parser.add_argument("--remote", metavar="URL",
                        help="remote tier URL (default: file://<data-dir>/remote); "
                             "s3://bucket/prefix uses the s3 plugin, with its options as "
                             "--set remote.storage.options.endpoint_url=...")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark SQL step")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.records < 1:
        raise CliError(f"--records must be positive, got {args.records}")
    st, tier = _demo_settings(args)
    data_dir = st.data_dirs[0]
    url = tier.url
    _wipe(st.data_dirs)
    segment_bytes = min(MAX_SEGMENT_BYTES, max(MIN_SEGMENT_BYTES, args.records * BYTES_PER_RECORD
                                               // (PARTITIONS * SEGMENTS_PER_PARTITION)))
    topic_config = {"remote.storage.enable": "true", "segment.bytes": segment_bytes,
                    "local.retention.bytes": 2 * segment_bytes, "file.delete.delay.ms": 0,
                    "remote.log.tail.ms": 1000, "remote.log.table.enable": "true",
                    "remote.log.table.compaction.enable": "true"}
    topic_config = {k: v for k, v in topic_config.items() if k not in st.config}
    started = time.perf_counter()
    mgr = LogManager.open(st.data_dirs, st.config, start_scheduler=False)
    try:
        topic_id = mgr.create_topic(TOPIC, PARTITIONS, topic_config)[0].topic_id
        print(f"Created topic {TOPIC!r} with {PARTITIONS} partitions in {data_dir} "
              f"(segment.bytes={segment_bytes:,}, local.retention.bytes={2 * segment_bytes:,}, "
              f"remote tier {url})")
        _remove_earlier_remote_topic(mgr, topic_id)
        batch_records = max(1, min(BATCH_RECORDS, segment_bytes // (2 * MAX_RECORD_BYTES)))
        produced = _produce(mgr, args.records, batch_records, quiet=args.quiet)
        print(f"\nTiering closed segments to {url} ...")
        with errors_reported_once() as reported:
            results = tier_with_progress(mgr, quiet=args.quiet)
            if print_tier_summary(mgr, results, reported):
                return 1
        if not _print_table_summary(results):
            return 1
        _publish_tails(mgr)
        _read_old_offsets(mgr, produced.start_ts)
        in_tier = _read_everything(mgr, produced, quiet=args.quiet)
        reader_options = _reader_options(tier)
    finally:
        mgr.close()
    _write_config(data_dir, tier)
    if args.no_spark:
        print("\nSpark step skipped (--no-spark).")
    elif run_spark_queries(url, reader_options, TOPIC, in_tier,
                           lambda: LogManager.open(st.data_dirs, st.config)) is False:
        return 1
    from tierlog.cli.demo_serve import serve_and_consume
    if not serve_and_consume(st.data_dirs, st.config, TOPIC):
        return 1
    print(f"\nDemo finished in {time.perf_counter() - started:.1f}s. Explore it with:\n"
          + "".join(f"  {command}\n" for command in follow_up_commands(data_dir)), end="")
    if tier.secret_names:
        print(f"(The tier's secrets ({', '.join(tier.secret_names)}) are not saved in "
              f"{data_dir / DATA_DIR_CONFIG}: give them to these commands with --set, or "
              f"through the environment, e.g. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.)")
    return 0


def follow_up_commands(data_dir: Path) -> list[str]:
    """The commands the demo suggests: they find the tier in the data dir's saved config."""
    return [f"tierlog --data-dir {data_dir} topics --describe",
            (f"tierlog --data-dir {data_dir} consume --topic {TOPIC} --partition 0 "
             f"--offset 0 --max-messages 3 --print-offset --print-key"),
            f"tierlog --data-dir {data_dir} scrub",
            f"tierlog dump-log --print-data-log {data_dir}/{TOPIC}-0 | less"]


def _demo_settings(args: argparse.Namespace) -> tuple[Settings, TierOptions]:
    """The user's settings (never the data dir's own server.properties, which the demo
    rewrites) and the tier, found as every command finds it (--remote first), by default
    ``<data-dir>/remote``."""
    st = settings(args, default_data_dir=DEFAULT_DATA_DIR, read_data_dir_config=False)
    url = args.remote
    if url is None and not st.config.get("remote.storage.url"):
        url = (st.data_dirs[0].resolve() / "remote").as_uri()
    tier = tier_options(st, url)
    return Settings(st.data_dirs, tier.apply(st.config)), tier


def _wipe(dirs: list[Path]) -> None:
    """Empty the demo's data dirs, refusing any that holds files but not the demo's marker."""
    for d in dirs:
        if d.is_dir() and any(d.iterdir()):
            if not (d / MARKER).exists():
                raise CliError(f"refusing to wipe {d}: it is not empty and was not made by "
                               f"tierlog demo (pass another --data-dir)")
            shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)
        (d / MARKER).write_text("written by tierlog demo; the directory is wiped by the next run\n")


def _remove_earlier_remote_topic(mgr: LogManager, topic_id: str) -> None:
    """A tier outside the data dir (S3) may hold the demo topic of an earlier run under
    another topic id; remove it so readers find one topic of that name."""
    rlm = mgr.remote_log_manager
    tier = None if rlm is None else getattr(rlm.rsm, "tier", None)
    if rlm is None or tier is None:  # no tier of tierlog's (a plugin RSM): nothing to clear
        return
    for tip in rlm.rlmm.list_partitions():
        if tip.topic == TOPIC and tip.topic_id != topic_id:
            print(f"Removing {tip.topic}-{tip.partition} of an earlier demo run (topic id "
                  f"{tip.topic_id}) from the remote tier")
            tier.fs.rm(tier.path(partition_dir_name(tip)), recursive=True)
            table = tier.path(table_key(tip.topic, tip.topic_id))
            if tier.fs.exists(table):  # its table too (one per topic id)
                tier.fs.rm(table, recursive=True)


def _print_table_summary(results: Mapping[str, tuple[TierResult, int, int]]) -> bool:
    """One line: the offsets the topic's table covers per partition after tiering (the table
    step ran in the same run); its errors on stderr. Returns whether there were none."""
    covered = {name: r.table_covered for name, (r, _, _) in sorted(results.items())
               if name.startswith(f"{TOPIC}-")}
    errors = [e for r, _, _ in results.values() for e in r.table_errors]
    compacted = sum(r.table_compacted for r, _, _ in results.values())
    for error in errors:
        print(f"tierlog: error: topic table: {error}", file=sys.stderr)
    print("Topic table (remote.log.table.enable=true): one Parquet file per tiered segment, "
          "committed to the topic's Iceberg table in the tier; it covers offsets below "
          + ", ".join(f"{end} in {name}" for name, end in covered.items()) + "."
          + (f" Compaction (remote.log.table.compaction.enable=true) merged them into "
             f"{plural(compacted, 'run file')}." if compacted else ""))
    return not errors


@dataclass
class Produced:
    """What the produce step wrote: committed records per partition and the time span."""

    start_ts: int
    committed: dict[int, int] = field(default_factory=dict)


def _produce(mgr: LogManager, total: int, batch_records: int, *, quiet: bool) -> Produced:
    """``total`` keyed records with headers, batches rotating through the codecs, timestamps
    spread over SPAN_MS; one committed transaction (partition 1) and one aborted (partition 0)."""
    logs = [mgr.log(TOPIC, p) for p in range(PARTITIONS)]
    keys = [b"user-%d" % k for k in range(KEYS)]
    key_partition = [partition_for_key(k, PARTITIONS) for k in keys]
    start_ts = system_time_ms() - SPAN_MS
    produced = Produced(start_ts, dict.fromkeys(range(PARTITIONS), 0))
    pending: list[list[Record]] = [[] for _ in range(PARTITIONS)]
    batches = [0] * PARTITIONS
    codec_headers = [("codec", c.encode()) for c in CODECS]
    txn_size = max(1, min(batch_records, total // 100))
    abort_at, commit_at = total * 2 // 5, total * 3 // 5
    began = time.perf_counter()
    with progress_bar(total=total, unit="rec", unit_scale=True, desc="produce",
                      quiet=quiet) as bar:
        for i in range(total):
            k = i % KEYS
            p = key_partition[k]
            ts = start_ts + i * SPAN_MS // total
            codec = batches[p] % len(CODECS)
            pending[p].append(Record(
                key=keys[k],
                value=b'{"n":%d,"user":%d,"amount":%d.%02d,"note":"tiered storage demo"}'
                      % (i, k, i % 997, i % 100),
                headers=[("source", b"tierlog-demo"), codec_headers[codec]],
                timestamp=ts))
            if len(pending[p]) == batch_records:
                logs[p].append_records(pending[p], compression=CODECS[codec])
                produced.committed[p] += batch_records
                batches[p] += 1
                pending[p] = []
                bar.update(batch_records)
            if i == abort_at:
                _transaction(logs[0], ABORT_PRODUCER_ID, txn_size, ts, commit=False)
            elif i == commit_at:
                _transaction(logs[1], COMMIT_PRODUCER_ID, txn_size, ts, commit=True)
                produced.committed[1] += txn_size
        for p, records in enumerate(pending):
            if records:
                logs[p].append_records(records, compression="zstd")
                produced.committed[p] += len(records)
                bar.update(len(records))
    elapsed = time.perf_counter() - began
    print(f"\nProduced {total:,} records in {elapsed:.1f}s ({total / elapsed:,.0f} records/s), "
          f"plus a committed transaction of {txn_size} records (partition 1) and an aborted "
          f"one of {txn_size} (partition 0)")
    for log in logs:
        print(f"  {log.directory.name}: offsets {log.log_start_offset}-{log.log_end_offset - 1}, "
              f"{plural(len(log.segments), 'segment')}, {human_bytes(log.size_in_bytes)}")
    return produced


def _transaction(log: Log, producer_id: int, size: int, ts: int, *, commit: bool) -> None:
    records = [Record(key=b"txn-%d" % n, value=b"%s transaction record %d"
                      % (b"committed" if commit else b"aborted", n),
                      headers=[("txn", b"commit" if commit else b"abort")], timestamp=ts)
               for n in range(size)]
    log.append_records(records, compression="lz4", producer_id=producer_id, producer_epoch=0,
                       base_sequence=0, transactional=True)
    log.append_marker(producer_id, 0, commit=commit)


def _read_old_offsets(mgr: LogManager, start_ts: int) -> None:
    """Read the first, a middle and the first local offset of each partition, and the
    offset one minute into the data, saying where each came from."""
    print("\nReading old offsets back through Log.read (read_committed):")
    print(f"  {'partition':>9} {'offset':>8}  {'served from':<12} {'timestamp':<23} "
          f"{'key':<9} value")
    for p in range(PARTITIONS):
        log = mgr.log(TOPIC, p)
        local = log.local_log_start_offset
        for offset in sorted({log.log_start_offset, local // 2, local}):
            _show_record(log, offset)
    log = mgr.log(TOPIC, 0)
    minute = start_ts + 60_000
    found = log.offset_for_timestamp(minute)
    print(f"\n  offset_for_timestamp({minute}) on partition 0 = {found} (one minute in):")
    if found is not None:
        _show_record(log, found)


def _show_record(log: Log, offset: int) -> None:
    """The first committed record at or after ``offset`` (it may sit in aborted data)."""
    for res in iter_fetches(log, offset, "read_committed"):
        record = next(iter(res.records()), None)
        if record is not None:
            break
    else:
        return
    where = "remote tier" if res.from_remote else "local disk"
    assert record.timestamp is not None, "a record read from a log has a timestamp"
    when = datetime.fromtimestamp(record.timestamp / 1000).isoformat(sep=" ",
                                                                     timespec="milliseconds")
    value = (record.value or b"").decode("utf-8", "replace")
    print(f"  {log.partition:>9} {record.offset:>8}  {where:<12} {when:<23} "
          f"{(record.key or b'').decode():<9} {value[:46]}")


def _read_everything(mgr: LogManager, produced: Produced, *, quiet: bool) -> int:
    """Read every partition from its log start with read_committed and check the counts;
    returns how many committed records the remote tier holds (what Spark should count)."""
    total = sum(produced.committed.values())
    began = time.perf_counter()
    remote = local = in_tier = 0
    with progress_bar(total=total, unit="rec", unit_scale=True, desc="read back",
                      quiet=quiet) as bar:
        for p in range(PARTITIONS):
            log = mgr.log(TOPIC, p)
            # What the tier holds: its segments, and the published tail up to the LSO.
            tail_on = log.config["remote.log.tail.ms"] >= 0
            highest = log.last_stable_offset - 1 if tail_on else log.highest_offset_in_remote
            count = 0
            for res in iter_fetches(log, log.log_start_offset, "read_committed"):
                offsets = [r.offset for r in res.records()]
                count += len(offsets)
                if res.from_remote:
                    remote += len(offsets)
                else:
                    local += len(offsets)
                in_tier += sum(1 for o in offsets if o <= highest)
                bar.update(len(offsets))
            if count != produced.committed[p]:
                raise CliError(f"partition {p}: read back {count} committed records, "
                               f"expected {produced.committed[p]}")
    elapsed = time.perf_counter() - began
    print(f"\nRead back all {remote + local:,} committed records in {elapsed:.1f}s: "
          f"{remote:,} from the remote tier, {local:,} from local disk (aborted records "
          f"skipped); counts match what was produced.")
    return in_tier


def _publish_tails(mgr: LogManager) -> None:
    """Publish the active segments' data below the high watermark too (remote.log.tail.ms),
    so readers of the tier see every record, and say what the tier now holds: the scheduler
    may have published a tail already, which leaves nothing new to publish now."""
    published = sum(mgr.publish_tail_now().values())
    rlm = mgr.remote_log_manager
    tier = None if rlm is None else getattr(rlm.rsm, "tier", None)
    logs = [lg for lg in mgr.tiered_logs() if lg.config["remote.log.tail.ms"] >= 0]
    if not logs:
        print("Tail publishing is off (remote.log.tail.ms=-1): readers of the tier see the "
              "closed segments only.")
        return
    if tier is None:  # no tier of tierlog's (a plugin RSM): nothing to read back
        print(f"Published the tail (remote.log.tail.ms) of {published} of "
              f"{plural(len(logs), 'partition')}.")
        return
    behind = []
    for lg in logs:
        tail = read_tail_manifest(tier, topic_id_partition(lg))
        if tail is None or tail.high_watermark < lg.high_watermark:
            behind.append(lg.directory.name)
    current = len(logs) - len(behind)
    print(f"Tail publishing (remote.log.tail.ms): the tier holds {current} of "
          f"{plural(len(logs), 'partition')} up to the high watermark ({published} published "
          f"now, {current - published} already by the scheduler)"
          + (f"; behind: {', '.join(behind)}." if behind else
             ": readers of the tier see everything."))


def _reader_options(tier: TierOptions) -> dict[str, Any]:
    """The remote storage plugin's options for readers (Spark): the same names
    (tierlog.remote.tier.options translates them for each); local's are the writer's own."""
    return {} if tier.manager == "local" else dict(tier.options)


def _write_config(data_dir: Path, tier: TierOptions) -> None:
    """Leave the tier's settings in the data dir, secrets left out, so later commands find
    the remote tier (tierlog.cli._tier_options reads them from there)."""
    atomic_write_text(data_dir / DATA_DIR_CONFIG,
                      "# written by tierlog demo: the remote tier of this data directory "
                      "(its secrets are not saved)\n" + format_properties(tier.saved_config()))
