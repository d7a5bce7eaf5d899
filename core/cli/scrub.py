"""``tierlog scrub [URL]``: check a remote tier's health (``tierlog.remote.ops.scrub``), print what
it found (or, with --json, the report as one JSON object on stdout), optionally repair what is
safe to repair; exit 1 when anything is wrong and not repaired. The tier and its storage
options are found as every command finds them (``tierlog.cli._tier_options``).
"""

from __future__ import annotations

import argparse

from tierlog.cli._common import Subcommands, plural, progress_bar, settings
from tierlog.cli._tier_options import tier_options
from tierlog.remote.ops.scrub import DEFAULT_GRACE_MS, ScrubReport, scrub_tier
from tierlog.remote.tier.manifest import remote_partitions
from tierlog.remote.tier.storage_from_url import open_storage


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "scrub", parents=[common], help="check (and repair) a remote tier",
        description="For every partition of the tier at URL: committed segments' objects exist "
                    "with their recorded sizes and CRCs, offsets have no gap or overlap in the "
                    "epoch lineage, indexes agree with their segment, the log start offset and "
                    "the tail are consistent; lists orphan objects and segments stuck in "
                    "COPY_SEGMENT_STARTED / DELETE_SEGMENT_STARTED; a topic's Iceberg table "
                    "against its segments (one file per committed segment, same record count, "
                    "no file without its segment). Exits 1 on any problem "
                    "left unrepaired. The tier's storage options come from --option, --set, "
                    "the --config file or <data-dir>/server.properties, in that order.")
    parser.add_argument("url", nargs="?", default=None,
                        help="the tier: s3://bucket/prefix, file:///dir or a path (default: "
                             "remote.storage.url of the settings)")
    parser.add_argument("--deep", action="store_true",
                        help="read every byte: the CRC of every batch, every index entry, "
                             "every producer snapshot, leader-epoch checkpoint, transaction "
                             "index and _metadata object (default: sizes, the first and last "
                             "batches, index tails)")
    parser.add_argument("--repair", action="store_true",
                        help="delete orphans and stale staging, rebuild missing or corrupt "
                             "offset and time indexes from their segment, convert a segment "
                             "whose table file is missing or damaged again, roll back stuck "
                             "copies and finish stuck deletes (nothing else is ever changed)")
    parser.add_argument("--force-owned", action="store_true",
                        help="with --repair, also repair stuck states of partitions a live log "
                             "owns (by default its RemoteLogManager is left to clean them)")
    parser.add_argument("--topic", metavar="T", help="only this topic's partitions")
    parser.add_argument("--grace-ms", type=int, default=DEFAULT_GRACE_MS, metavar="MS",
                        help="only flag unfinished states and unnamed objects older than this "
                             f"(default {DEFAULT_GRACE_MS}: an upload in flight is no orphan)")
    parser.add_argument("--option", "-o", action="append", metavar="KEY=VALUE",
                        help="a storage option of the tier (endpoint_url, key, secret, region, "
                             "...; repeatable)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    st = settings(args)
    tier = tier_options(st, args.url, args.option, purpose="scrub")
    storage = open_storage(tier.url, tier.options, manager=tier.manager)
    try:
        total = len([p for p in remote_partitions(storage.tier)
                     if args.topic is None or p.topic == args.topic])
        with progress_bar(total=total, unit="partition", desc="scrub",
                          quiet=args.quiet) as bar:
            def progress(name: str) -> None:
                bar.set_postfix_str(name, refresh=False)
                bar.update(1)
            report = scrub_tier(storage, deep=args.deep, repair=args.repair,
                                repair_owned=args.force_owned, topic=args.topic,
                                grace_ms=args.grace_ms, progress=progress,
                                index_interval_bytes=st.manager_config.topic_defaults[
                                    "index.interval.bytes"])
    finally:
        storage.close()
    report.url = tier.url
    if args.json:
        print(report.to_json())
    else:
        print_report(report)
    return 0 if report.ok else 1


def print_report(report: ScrubReport) -> None:
    """The findings, each with what was done about it, then one summary line."""
    repaired = {id(r.finding): r.action for r in report.repairs}
    for finding in report.findings:
        action = repaired.get(id(finding))
        print(f"{finding}" + (f" [repaired: {action}]" if action else ""))
        if finding.object:
            print(f"    object: {finding.object}")
    for note in report.notes:
        print(f"note: {note}")
    left = len(report.unrepaired())
    mode = "deep" if report.deep else "quick"
    print(f"{report.url}: {mode} scrub of {plural(report.partitions, 'partition')}, "
          f"{plural(report.segments, 'committed segment')}"
          + (f", {plural(report.tables, 'table')}" if report.tables else "")
          + f": {plural(len(report.findings), 'problem')}, {len(report.repairs)} repaired, "
          f"{left} left; {report.requests.get('gets', 0)} GETs, "
          f"{report.requests.get('bytes', 0):,} bytes read")
