"""The ``tierlog`` command line: one subcommand per job, Kafka's config names for settings.

User mistakes (bad config, bad offsets, missing files) print one line and exit 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from tierlog.errors import TierlogError
from tierlog.log import Log
from tierlog.records.record import Record

DEMO_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _demo(args: argparse.Namespace) -> int:
    """Append records with every codec to a local log, roll segments, read back, print."""
    data_dir = Path(args.data_dir)
    partition_dir = data_dir / "demo-0"
    if partition_dir.exists():
        shutil.rmtree(partition_dir)
    config = {"segment.bytes": args.segment_bytes, "index.interval.bytes": 4096}
    start = time.perf_counter()
    total = args.records
    batch_size = args.batch_size
    base_ts = int(time.time() * 1000) - total  # one record per millisecond, ending now
    with Log.open(partition_dir, config) as log:
        with tqdm(total=total, unit="rec", desc="produce", disable=args.quiet) as bar:
            for first in range(0, total, batch_size):
                n = min(batch_size, total - first)
                records = [
                    Record(key=b"user-%d" % ((first + i) % 997),
                           value=b'{"n": %d, "payload": "%s"}' % (first + i, b"x" * 60),
                           headers=[("source", b"demo")], timestamp=base_ts + first + i)
                    for i in range(n)
                ]
                codec = DEMO_CODECS[(first // batch_size) % len(DEMO_CODECS)]
                log.append_records(records, compression=codec)
                bar.update(n)
        produce_s = time.perf_counter() - start
        print(f"\nappended {total:,} records in {produce_s:.2f}s "
              f"({total / produce_s:,.0f} records/s) to {partition_dir}")
        print(f"log start offset {log.log_start_offset}, log end offset {log.log_end_offset}, "
              f"{len(log.segments)} segments, {log.size_in_bytes:,} bytes")
        print(f"\n{'segment':>22} {'bytes':>10} {'index entries':>14} {'max timestamp':>15}")
        for segment in log.segments:
            print(f"{segment.path.name:>22} {segment.size:>10,} "
                  f"{segment.offset_index.entries:>14} {segment.max_timestamp_so_far:>15}")
        start = time.perf_counter()
        count, offset = 0, log.log_start_offset
        with tqdm(total=total, unit="rec", desc="consume", disable=args.quiet) as bar:
            while offset < log.log_end_offset:
                got = list(log.read(offset, max_bytes=1 << 20).records())
                if not got:
                    break
                count += len(got)
                offset = got[-1].offset + 1
                bar.update(len(got))
        consume_s = time.perf_counter() - start
        print(f"\nread back {count:,} records in {consume_s:.2f}s "
              f"({count / max(consume_s, 1e-9):,.0f} records/s)")
        print(f"\n{'offset':>10} {'timestamp':>15} {'key':>10}  value")
        for probe in (0, total // 3, total // 2, total - 1):
            record = next(iter(log.read(probe).records()))
            print(f"{record.offset:>10} {record.timestamp:>15} {record.key.decode():>10}  "
                  f"{record.value[:30].decode()}...")
        middle_ts = base_ts + total // 2
        print(f"\noffset_for_timestamp({middle_ts}) = {log.offset_for_timestamp(middle_ts)}")
        if count != total:
            print(f"error: read {count} records, expected {total}", file=sys.stderr)
            return 1
    return 0


def _plugins(args: argparse.Namespace) -> int:
    """List every plugin, its distribution and the hooks it implements; and load failures."""
    from tierlog.plugin_manager import get_plugins

    host = get_plugins()
    rows = host.plugins()
    width = max((len(p.name) for p in rows), default=4)
    dist_width = max((len(p.distribution) for p in rows), default=12)
    print(f"{'plugin':<{width}}  {'distribution':<{dist_width}}  hooks")
    for plugin in rows:
        print(f"{plugin.name:<{width}}  {plugin.distribution:<{dist_width}}  {', '.join(plugin.hooks)}")
    registries = host.registries
    print(f"\nindex types:       {', '.join(sorted(registries.index_types)) or '-'}")
    print(f"cleanup policies:  {', '.join(sorted(registries.cleanup_policies)) or '-'}")
    print(f"remote storage:    {', '.join(sorted(registries.remote_storage)) or '-'}")
    for failure in host.failures:
        print(f"FAILED {failure.name} ({failure.distribution}): {failure.error}", file=sys.stderr)
    return 1 if host.failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="Kafka's storage engine in Python, with tiered storage.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the end-to-end demo on a local log",
                          description="Append records with every codec to ./demo-data, roll "
                                      "segments, read them back and print offsets/timestamps.")
    demo.add_argument("--data-dir", default="demo-data", help="where to write (default: %(default)s)")
    demo.add_argument("--records", type=int, default=200_000, help="records to append")
    demo.add_argument("--batch-size", type=int, default=500, help="records per batch")
    demo.add_argument("--segment-bytes", type=int, default=1 << 20, help="segment.bytes")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)

    plugins = sub.add_parser("plugins", help="list plugins and the hooks they implement",
                             description="List every discovered plugin (built-in and entry "
                                         "points), its distribution and hook implementations.")
    plugins.set_defaults(func=_plugins)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except TierlogError as exc:
        print(f"tierlog: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
