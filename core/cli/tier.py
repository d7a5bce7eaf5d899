"""``tierlog tier``: one tiering run now (copy closed segments to the remote tier, remote
retention, then local retention), with a progress bar and a per-partition summary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from tierlog.cli._common import (
    CliError,
    add_metrics_port,
    human_bytes,
    metrics_served,
    open_manager,
    plural,
    settings,
)
from tierlog.manager import LogManager
from tierlog.remote.api import RemoteLogSegmentMetadata
from tierlog.remote.rlm import TierResult


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
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
    st = settings(args)
    with open_manager(st) as mgr:
        if mgr.remote_log_manager is None:
            raise CliError("no topic has remote.storage.enable=true (create one with "
                           "tierlog topics --create --topic T --config remote.storage.enable=true"
                           " and set remote.storage.url)")
        with metrics_served(mgr, args.metrics_port, args.metrics_host):
            results = tier_with_progress(mgr, quiet=args.quiet)
        failed = print_tier_summary(mgr, results)
    return 1 if failed else 0


def tier_with_progress(mgr: LogManager, *,
                       quiet: bool = False) -> dict[str, tuple[TierResult, int, int]]:
    """Run ``mgr.tier_now`` under a progress bar of copied segments. Returns, per partition
    directory, its result and its local segment count before and after."""
    before = {lg.directory.name: len(lg.segments) for lg in mgr.tiered_logs()}
    with tqdm(total=mgr.copy_candidates(), unit="seg", desc="tier", disable=quiet,
              file=sys.stderr) as bar:
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
    after = {lg.directory.name: len(lg.segments) for lg in mgr.tiered_logs()}
    return {name: (result, before.get(name, 0), after.get(name, 0))
            for name, result in sorted(results.items())}


def print_tier_summary(mgr: LogManager, results: dict[str, tuple[TierResult, int, int]]) -> bool:
    """One line per partition; returns True when any partition reported an error."""
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
            print(f"tierlog: error: {name}: {error}", file=sys.stderr)
    return failed
