"""``tierlog groups --reset-offsets``: kafka-consumer-groups' offset reset. The plan (each
partition's new offset) is computed from the broker's offsets and printed; only ``--execute``
commits it, and only while the group has no active member (a live member would overwrite it).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from tierlog.cli._common import CliError
from tierlog.cli.groups import (
    INACTIVE_STATES,
    committed_offsets,
    group_description,
    list_offsets,
    print_table,
    state_name,
)
from tierlog.cli.wire import kafka, result, topic_partitions
from tierlog.common.clock import system_time_ms

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

#: Java's Duration.parse subset Kafka's --by-duration takes: PnDTnHnMnS.
DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime",
         "by_duration")

Plan = dict[tuple[str, int], int]


def run(admin: AdminClient, args: argparse.Namespace, groups: list[str]) -> None:
    if not any(getattr(args, s) not in (None, False) for s in SPECS):
        raise CliError("--reset-offsets needs one of " + ", ".join(
            "--" + s.replace("_", "-") for s in SPECS))
    if not args.topic and not args.all_topics:
        raise CliError("--reset-offsets needs --topic or --all-topics")
    for group in groups:
        state = state_name(group_description(admin, group).state)
        if state not in INACTIVE_STATES:
            raise CliError(f"assignments can only be reset if the group {group!r} is "
                           f"inactive, but the current state is {state}")
        plan = plan_reset(admin, args, group)
        if args.execute:
            _commit(admin, group, plan)
        print()
        print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                    [(group, t, p, offset) for (t, p), offset in sorted(plan.items())])
    if not args.execute and not args.dry_run:
        print("\nWARN: nothing was changed (no --execute): this is the plan; add --execute "
              "to commit it, or --dry-run to say a plan is what you want.", file=sys.stderr)


def plan_reset(admin: AdminClient, args: argparse.Namespace, group: str) -> Plan:
    """(topic, partition) -> the new committed offset of ``group``, per the options."""
    ck = kafka()
    spec = ck.admin.OffsetSpec
    committed = committed_offsets(admin, group)
    partitions = (_scope(admin, args.topic) if args.topic else
                  sorted({tp for tp in committed}))
    if not partitions:
        raise CliError(f"group {group!r} has no committed offsets: name the topics with --topic")
    earliest = list_offsets(admin, partitions, spec.earliest())
    latest = list_offsets(admin, partitions, spec.latest())

    def bounded(tp: tuple[str, int], offset: int) -> int:
        return min(max(offset, earliest[tp]), latest[tp])

    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_current:
        return {tp: committed.get(tp, latest[tp]) for tp in partitions}
    if args.to_offset is not None:
        return {tp: bounded(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in committed]
        if missing:
            raise CliError(f"--shift-by: group {group!r} has no committed offset of "
                           f"{', '.join(missing)} to shift")
        return {tp: bounded(tp, committed[tp] + args.shift_by) for tp in partitions}
    when = (_datetime_ms(args.to_datetime) if args.to_datetime is not None
            else system_time_ms() - _duration_ms(args.by_duration))
    found = list_offsets(admin, partitions, spec.for_timestamp(when))
    # No record at or after the time: the log end, as Kafka does.
    return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}


def _scope(admin: AdminClient, topics: list[str]) -> list[tuple[str, int]]:
    """--topic T (every partition) or T:P,P (those), checked against the broker's metadata."""
    out: list[tuple[str, int]] = []
    for item in topics:
        topic, sep, listed = item.partition(":")
        existing = topic_partitions(admin, topic)
        if not sep:
            out += [(topic, p) for p in existing]
            continue
        try:
            wanted = [int(p) for p in listed.split(",") if p.strip()]
        except ValueError:
            raise CliError(f"--topic expects T or T:P,P..., got {item!r}") from None
        unknown = [p for p in wanted if p not in existing]
        if unknown or not wanted:
            raise CliError(f"--topic {item}: topic {topic!r} has partitions "
                           f"0-{existing[-1]}")
        out += [(topic, p) for p in wanted]
    return sorted(set(out))


def _datetime_ms(text: str) -> int:
    from tierlog.cli.restore import parse_timestamp  # the CLI's one reading of a time

    return parse_timestamp(text, "--to-datetime")


def _duration_ms(text: str) -> int:
    match = DURATION.fullmatch(text)
    if match is None or text in ("P", "PT") or text.endswith("T"):
        raise CliError(f"--by-duration expects an ISO 8601 duration such as P1DT2H30M or "
                       f"PT15M, got {text!r}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _commit(admin: AdminClient, group: str, plan: Plan) -> None:
    ck = kafka()
    request = [ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition(t, p, offset) for (t, p), offset in sorted(plan.items())])]
    done = result(admin.alter_consumer_group_offsets(request)[group],
                  f"committing group {group!r}'s new offsets")
    for tp in done.topic_partitions:
        if tp.error is not None:
            raise CliError(f"committing group {group!r}'s offset of {tp.topic}-{tp.partition}: "
                           f"{tp.error.str()}")
