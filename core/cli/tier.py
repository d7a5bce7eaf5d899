"""``tierlog tier``: one tiering run now (copy closed segments to the remote tier, remote
retention, then local retention), with a progress bar and a per-partition summary.

A partition's failure is printed once, in its summary line: the library's warnings about that
partition during the run (its attach when the data dir opened, each retry) are held back and
dropped (:func:`errors_reported_once`); the others are printed after the summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tierlog.cli._common import (
    CliError,
    Subcommands,
    add_metrics_port,
    holding_warnings,
    human_bytes,
    metrics_served,
    open_manager,
    plural,
    progress_bar,
    settings,
)
from tierlog.cli._tier_options import with_configured_tier
from tierlog.manager.log_manager import LogManager
from tierlog.remote.api import RemoteLogSegmentMetadata
from tierlog.remote.rlm.rlm import TierResult


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "tier", parents=[common], help="copy closed segments to the remote tier now",
        description="Run tiering once for every topic with remote.storage.enable=true: copy "
                    "each closed segment below the last stable offset to the remote tier "
                    "(remote.storage.manager / remote.storage.url), enforce retention.ms/bytes "
                    "over the whole log, then local.retention.ms/bytes on the local copies.")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_metrics_port(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    st = with_configured_tier(settings(args))
    with errors_reported_once() as reported, open_manager(st) as mgr:
        if not any(lg.remote_storage_enabled for lg in mgr.logs().values()):
            raise CliError("no topic has remote.storage.enable=true (create one with "
                           "tierlog topics --create --topic T --config remote.storage.enable=true"
                           " and set remote.storage.url)")
        with metrics_served(mgr, args.metrics_port, args.metrics_host):
            results = tier_with_progress(mgr, quiet=args.quiet)
        failed = print_tier_summary(mgr, results, reported)
    return 1 if failed else 0


@contextmanager
def errors_reported_once() -> Iterator[set[str]]:
    """Hold back the warnings and errors ``tierlog`` logs while the block runs; yields the set
    the block fills with the partition directories whose errors it printed itself. On the
    way out the held records about those partitions are dropped, the others printed."""
    reported: set[str] = set()
    with holding_warnings() as held:
        try:
            yield reported
        finally:
            held[:] = [record for record in held
                       if not any(record.getMessage().startswith(f"{name}: ")
                                  for name in reported)]


def tier_with_progress(mgr: LogManager, *,
                       quiet: bool = False) -> dict[str, tuple[TierResult, int, int]]:
    """Run ``mgr.tier_now`` under a progress bar of copied segments. Returns, per partition
    directory, its result and its local segment count before and after."""
    before = _local_segments(mgr)
    with progress_bar(total=mgr.copy_candidates(), unit="seg", desc="tier",
                      quiet=quiet) as bar:
        def progress(event: str, metadata: RemoteLogSegmentMetadata) -> None:
            if event == "copied":  # called from the copy threads; tqdm locks its updates
                tip = metadata.remote_log_segment_id.topic_id_partition
                bar.update(1)
                bar.set_postfix_str(f"{tip.topic}-{tip.partition} @{metadata.start_offset}",
                                    refresh=False)
        results = mgr.tier_now(progress)
    # No background thread runs in a command: remove now what retention scheduled for now
    # (file.delete.delay.ms=0); later deletes happen when the log is next opened.
    mgr.scheduler.run_due()
    after = _local_segments(mgr)
    return {name: (result, before.get(name, 0), after.get(name, 0))
            for name, result in sorted(results.items())}


def _local_segments(mgr: LogManager) -> dict[str, int]:
    """Local segments per directory of every partition with remote.storage.enable, the tier
    attached or not (a partition the tier is unavailable to keeps all of its segments)."""
    return {lg.directory.name: len(lg.segments) for lg in mgr.logs().values()
            if lg.remote_storage_enabled and not lg.closed}


def print_tier_summary(mgr: LogManager, results: dict[str, tuple[TierResult, int, int]],
                       reported: set[str] | None = None) -> bool:
    """One line per partition, then one error line per failure (on stderr); returns True
    when any partition reported an error. The partitions with errors are added to
    ``reported`` (see :func:`errors_reported_once`)."""
    failed = False
    logs = {lg.directory.name: lg for lg in mgr.tiered_logs()}
    for name, (result, before, after) in results.items():
        copied_bytes = sum(m.segment_size_in_bytes for m in result.copied)
        log = logs.get(name)
        offsets = (f"; log start {log.log_start_offset}, local log start "
                   f"{log.local_log_start_offset}, remote up to {log.highest_offset_in_remote}"
                   if log is not None else "")
        print(f"{name}: copied {plural(len(result.copied), 'segment')} "
              f"({human_bytes(copied_bytes)}), deleted "
              f"{plural(len(result.deleted_remote), 'remote segment')}, local segments "
              f"{before} -> {after}{offsets}")
        for error in result.errors:
            failed = True
            if reported is not None:
                reported.add(name)
            # Errors of the remote layer start with the partition's name already.
            text = error if error.startswith(f"{name}: ") else f"{name}: {error}"
            print(f"tierlog: error: {text}", file=sys.stderr)
    return failed
