"""``tierlog groups``: kafka-consumer-groups.sh against a broker (``--bootstrap-server``):
list the consumer groups, describe a group's committed offsets, log end offsets and lag per
partition with the member consuming it, reset its offsets (:mod:`tierlog.cli.wire_reset`,
a dry run unless --execute) and delete groups.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tierlog.cli._common import CliError, Subcommands
from tierlog.cli.wire import (
    REQUEST_TIMEOUT_S,
    add_bootstrap_options,
    admin_client,
    kafka,
    result,
    uses_broker,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka.admin import AdminClient

    # where they are defined: confluent_kafka.admin does not re-export them to a type checker
    from confluent_kafka.admin._group import (
        ConsumerGroupDescription,
        ConsumerGroupListing,
        MemberDescription,
    )
    from confluent_kafka.admin._listoffsets import OffsetSpec

#: Kafka's names of the group states, by confluent-kafka's ConsumerGroupState member name.
STATE_NAMES = {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead",
               "PREPARING_REBALANCING": "PreparingRebalance",
               "COMPLETING_REBALANCING": "CompletingRebalance", "UNKNOWN": "Unknown"}
#: States in which a group has no member, so its offsets may be reset.
INACTIVE_STATES = ("Empty", "Dead")
#: What kafka-consumer-groups prints for an unknown value.
NONE = "-"
DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "groups", parents=[common],
        help="list, describe, reset the offsets of or delete consumer groups",
        description="Kafka's kafka-consumer-groups.sh against a running broker (tierlog serve "
                    "or any Kafka-compatible one): list groups, describe a group's lag per "
                    "partition, reset its offsets (a dry run that prints the plan unless "
                    "--execute; the group must have no active member) or delete groups.")
    verb = parser.add_mutually_exclusive_group(required=True)
    verb.add_argument("--list", action="store_true", help="list the consumer groups")
    verb.add_argument("--describe", action="store_true",
                      help="each partition of --group: CURRENT-OFFSET, LOG-END-OFFSET, LAG "
                           "and the member consuming it")
    verb.add_argument("--reset-offsets", action="store_true",
                      help="move --group's committed offsets of --topic or --all-topics "
                           "(one of --to-earliest, --to-latest, --to-offset, --shift-by, "
                           "--to-datetime, --by-duration, --to-current)")
    verb.add_argument("--delete", action="store_true", help="delete --group (inactive only)")
    parser.add_argument("--group", action="append", metavar="GROUP",
                        help="the group to describe, reset or delete (repeatable)")
    parser.add_argument("--all-groups", action="store_true",
                        help="--describe, --reset-offsets or --delete every group")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--state", action="store_true",
                      help="with --list: each group's state too; with --describe: the group's "
                           "coordinator, assignor, state and member count")
    view.add_argument("--members", action="store_true",
                      help="with --describe: each member and how many partitions it has")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="T[:P,P...]",
                       help="with --reset-offsets: the topic, or some of its partitions "
                            "(repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="with --reset-offsets: every topic the group has offsets of")
    spec = parser.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true", help="to each log start offset")
    spec.add_argument("--to-latest", action="store_true", help="to each log end offset")
    spec.add_argument("--to-current", action="store_true",
                      help="to the committed offset (the log end where there is none)")
    spec.add_argument("--to-offset", type=int, metavar="N",
                      help="to offset N (kept within the log's start and end)")
    spec.add_argument("--shift-by", type=int, metavar="N",
                      help="by N from the committed offset (negative: back)")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                      help="to the first offset at or after this time (UTC unless it names a "
                           "zone)")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS",
                      help="to the first offset at or after this long ago (ISO 8601 "
                           "duration, e.g. PT1H30M)")
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true",
                          help="print the new offsets only (the default)")
    run_mode.add_argument("--execute", action="store_true",
                          help="commit the new offsets, then print them")
    add_bootstrap_options(parser, required=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    uses_broker(args)
    admin = admin_client(args)
    if args.list:
        _list(admin, args.state)
        return 0
    groups = _groups(admin, args)
    if args.describe:
        for group in groups:
            if args.state:
                _describe_state(admin, group)
            elif args.members:
                _describe_members(admin, group)
            else:
                describe(admin, group)
    elif args.delete:
        _delete(admin, groups)
    else:
        from tierlog.cli import wire_reset

        wire_reset.run(admin, args, groups)
    return 0


def _groups(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    """The groups a verb works on: --group ..., or every group with --all-groups."""
    if args.all_groups and args.group:
        raise CliError("give --group or --all-groups, not both")
    if args.all_groups:
        return sorted(g.group_id for g in _listings(admin))
    if not args.group:
        verb = "describe" if args.describe else "delete" if args.delete else "reset-offsets"
        raise CliError(f"--{verb} needs --group (or --all-groups)")
    return list(args.group)


def _listings(admin: AdminClient) -> list[ConsumerGroupListing]:
    listed = result(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S),
                    "listing consumer groups")
    return list(listed.valid)


def state_name(state: object) -> str:
    """Kafka's name of a group state (``Stable``, ``Empty``...)."""
    return STATE_NAMES.get(getattr(state, "name", str(state)), str(state))


def _list(admin: AdminClient, with_state: bool) -> None:
    listings = sorted(_listings(admin), key=lambda g: g.group_id)
    if not with_state:
        for listing in listings:
            print(listing.group_id)
        return
    print_table(("GROUP", "STATE"), [(g.group_id, state_name(g.state)) for g in listings])


def group_description(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    described: Future[ConsumerGroupDescription] = admin.describe_consumer_groups(
        [group], request_timeout=REQUEST_TIMEOUT_S)[group]
    return result(described, f"describing group {group!r}")


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the group's committed offset, for the partitions that have one."""
    ck = kafka()
    request = [ck.ConsumerGroupTopicPartitions(group)]
    listed = result(admin.list_consumer_group_offsets(
        request, request_timeout=REQUEST_TIMEOUT_S)[group], f"fetching group {group!r}'s offsets")
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions
            if tp.offset >= 0}


def list_offsets(admin: AdminClient, partitions: Iterable[tuple[str, int]], spec: OffsetSpec
                 ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset ``spec`` (an OffsetSpec) names on the broker."""
    ck = kafka()
    wanted = {ck.TopicPartition(t, p): spec for t, p in partitions}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
    return {(tp.topic, tp.partition): result(f, f"listing offsets of {tp.topic}-{tp.partition}"
                                             ).offset for tp, f in futures.items()}


def describe(admin: AdminClient, group: str) -> None:
    """kafka-consumer-groups --describe: one row per partition the group has an offset of
    or a member consuming it, lag = log end offset - committed offset."""
    ck = kafka()
    description = _existing_group(admin, group)
    owners: dict[tuple[str, int], MemberDescription] = {}
    for owner in description.members:
        for tp in owner.assignment.topic_partitions or ():
            owners[(tp.topic, tp.partition)] = owner
    committed = committed_offsets(admin, group)
    partitions = sorted(set(committed) | set(owners))
    ends = list_offsets(admin, partitions, ck.admin.OffsetSpec.latest())
    rows = []
    for topic, partition in partitions:
        current, end = committed.get((topic, partition)), ends[(topic, partition)]
        member = owners.get((topic, partition))
        rows.append((group, topic, partition, NONE if current is None else current, end,
                     NONE if current is None else max(0, end - current),
                     member.member_id if member else NONE,
                     member.host if member else NONE, member.client_id if member else NONE))
    print()
    print_table(DESCRIBE_COLUMNS, rows)


def _existing_group(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    """The group's description, its state said on stderr as kafka-consumer-groups says it
    when it has no active member or is rebalancing; CliError if the group does not exist."""
    description = group_description(admin, group)
    state = state_name(description.state)
    if state == "Dead":
        raise CliError(f"consumer group {group!r} does not exist")
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state != "Stable":
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return description


def _describe_state(admin: AdminClient, group: str) -> None:
    """kafka-consumer-groups --describe --state."""
    description = group_description(admin, group)
    coordinator = description.coordinator
    where = f"{coordinator.host}:{coordinator.port} ({coordinator.id})" if coordinator else NONE
    print()
    print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                [(group, where, description.partition_assignor or NONE,
                  state_name(description.state), len(description.members))])


def _describe_members(admin: AdminClient, group: str) -> None:
    """kafka-consumer-groups --describe --members."""
    description = _existing_group(admin, group)
    print()
    print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"),
                [(group, m.member_id, m.host, m.client_id,
                  len(m.assignment.topic_partitions or ()))
                 for m in sorted(description.members, key=lambda m: m.member_id)])


def _delete(admin: AdminClient, groups: list[str]) -> None:
    futures = admin.delete_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
    failed = []
    for group in groups:
        try:
            result(futures[group], f"group {group!r}")
        except CliError as exc:
            failed.append(str(exc))
    deleted = [g for g in groups if not any(f.startswith(f"group {g!r}:") for f in failed)]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    if failed:
        raise CliError("could not delete " + "; ".join(failed))


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns as wide as their widest cell, one space apart."""
    cells = [list(columns), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
