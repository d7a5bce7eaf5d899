"""Tier a topic to S3 (or MinIO) and read its old offsets back from there.

Produces records to a topic with ``remote.storage.enable=true``, runs tiering once (copy the
closed segments to ``s3://BUCKET/PREFIX``, then local retention deletes most local copies),
and reads offsets below the local log start offset: they are served by the remote tier.

Run against MinIO (credentials from the usual AWS environment variables, or --key/--secret):
    python examples/tiering_to_s3.py s3://tierlog/demo --endpoint-url http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
import tempfile

from tierlog import Record
from tierlog.manager import LogManager


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="s3://bucket/prefix (the bucket must exist)")
    parser.add_argument("--endpoint-url", help="S3-compatible endpoint, e.g. MinIO's")
    parser.add_argument("--key", help="access key id (default: from the environment)")
    parser.add_argument("--secret", help="secret access key (default: from the environment)")
    parser.add_argument("--region", help="bucket region")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--data-dir", help="local log dir (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.data_dir:
        run(args, args.data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="tierlog-s3-") as tmp:
            run(args, tmp)


def run(args: argparse.Namespace, data_dir: str) -> None:
    config = {"remote.storage.manager": "s3", "remote.storage.url": args.url}
    for option in ("endpoint_url", "key", "secret", "region"):
        value = getattr(args, option)
        if value:
            config[f"remote.storage.options.{option}"] = value
    topic_config = {"remote.storage.enable": True, "segment.bytes": 8 * 1024,
                    "local.retention.bytes": 16 * 1024}
    with LogManager.open(data_dir, config) as mgr:
        log = mgr.create_topic("clicks", partitions=1, config=topic_config)[0]
        for first in range(0, args.records, 500):
            log.append_records([Record(key=b"user-%d" % (n % 100), value=b"click %d" % n)
                                for n in range(first, min(first + 500, args.records))],
                               compression="lz4")
        results = mgr.tier_now()  # copy closed segments, then apply local retention
        copied = results[log.directory.name].copied
        print(f"copied {len(copied)} segments to {args.url}; local log start offset is now "
              f"{log.local_log_start_offset}, remote holds offsets up to "
              f"{log.highest_offset_in_remote}")
        for offset in (0, log.local_log_start_offset // 2, log.local_log_start_offset):
            res = log.read(offset, max_bytes=64 * 1024)
            record = next(iter(res.records()))
            where = "remote tier" if res.from_remote else "local disk"
            print(f"offset {record.offset}: {record.value.decode()!r} from the {where}")


if __name__ == "__main__":
    main()
