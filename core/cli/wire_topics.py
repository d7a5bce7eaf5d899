"""``tierlog topics --bootstrap-server``: kafka-topics.sh's verbs through a broker's admin API
(CreateTopics, Metadata, DescribeConfigs, IncrementalAlterConfigs, CreatePartitions,
DeleteTopics) with confluent-kafka's AdminClient; the options are checked by
:func:`tierlog.cli.topics.check_options`, the same as for a data dir.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tierlog.cli._common import parse_assignments
from tierlog.cli.topics import config_changes, listing_order
from tierlog.cli.wire import REQUEST_TIMEOUT_S, admin_client, kafka, result

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    # where it is defined: confluent_kafka.admin does not re-export it to a type checker
    from confluent_kafka.admin._topic import TopicDescription

#: Kafka's "let the broker decide" for a partition count or a replication factor.
BROKER_DEFAULT = -1


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    if args.if_exists or args.if_not_exists:
        exists = args.topic in admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics
        if exists == args.if_not_exists:  # nothing to do, as kafka-topics
            return 0
    if args.create:
        new = kafka().admin.NewTopic(
            args.topic, num_partitions=args.partitions or BROKER_DEFAULT,
            replication_factor=args.replication_factor or BROKER_DEFAULT,
            config=parse_assignments(args.topic_config, "--config"))
        result(admin.create_topics([new], request_timeout=REQUEST_TIMEOUT_S)[args.topic],
               f"creating topic {args.topic!r}")
        print(f"Created topic {args.topic}.")
    elif args.delete:
        result(admin.delete_topics([args.topic], request_timeout=REQUEST_TIMEOUT_S)[args.topic],
               f"deleting topic {args.topic!r}")
        print(f"Deleted topic {args.topic}.")
    elif args.alter:
        _alter(admin, args)
    else:
        descriptions = _descriptions(admin, [args.topic] if args.topic else None)
        internal = {name for name, d in descriptions.items() if d.is_internal}
        names = listing_order(descriptions, internal.__contains__, args.exclude_internal)
        if args.list:
            for name in names:
                print(name)
        else:
            configs = _overrides(admin, names)
            for name in names:
                _describe(descriptions[name], configs[name])
    return 0


def _alter(admin: AdminClient, args: argparse.Namespace) -> None:
    ck = kafka()
    if args.partitions is not None:
        grow = ck.admin.NewPartitions(args.topic, args.partitions)
        result(admin.create_partitions([grow], request_timeout=REQUEST_TIMEOUT_S)[args.topic],
               f"adding partitions to topic {args.topic!r}")
        print(f"Altered topic {args.topic}: PartitionCount: {args.partitions}")
    if args.add_config or args.delete_config:
        added, removed = config_changes(args)
        op = ck.admin.AlterConfigOpType
        entries = [ck.admin.ConfigEntry(k, v, incremental_operation=op.SET)
                   for k, v in added.items()]
        entries += [ck.admin.ConfigEntry(k, None, incremental_operation=op.DELETE)
                    for k in removed]
        resource = ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, args.topic,
                                           incremental_configs=entries)
        result(admin.incremental_alter_configs([resource])[resource],
               f"altering the configs of topic {args.topic!r}")
        print(f"Altered topic {args.topic}: Configs: {_overrides(admin, [args.topic])[args.topic]}")


def _descriptions(admin: AdminClient, topics: list[str] | None) -> dict[str, TopicDescription]:
    """Name -> TopicDescription of ``topics`` (every topic when None)."""
    ck = kafka()
    if topics is None:
        topics = list(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    if not topics:
        return {}
    futures = admin.describe_topics(ck.TopicCollection(topics),
                                    request_timeout=REQUEST_TIMEOUT_S)
    return {name: result(future, f"describing topic {name!r}")
            for name, future in futures.items()}


def _overrides(admin: AdminClient, topics: list[str]) -> dict[str, str]:
    """Name -> ``k=v,...`` of the topic's own configs (DYNAMIC_TOPIC_CONFIG), as the data-dir
    describe shows its overrides."""
    ck = kafka()
    if not topics:
        return {}
    own = ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    resources = [ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, t) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    out = {}
    for resource, future in futures.items():
        entries = result(future, f"describing the configs of topic {resource.name!r}")
        out[resource.name] = ",".join(
            f"{e.name}={'null' if e.value is None else e.value}"  # a sensitive one is null
            for e in sorted(entries.values(), key=lambda e: e.name)
            if getattr(e.source, "value", e.source) == own)  # an int or the enum
    return out


def _describe(description: TopicDescription, configs: str) -> None:
    """kafka-topics' lines: the topic, then one per partition."""
    partitions = sorted(description.partitions, key=lambda p: p.id)
    replicas = len(partitions[0].replicas) if partitions else 0
    print(f"Topic: {description.name}\tTopicId: {description.topic_id}\t"
          f"PartitionCount: {len(partitions)}\tReplicationFactor: {replicas}\t"
          f"Configs: {configs}")
    for p in partitions:
        leader = p.leader.id if p.leader is not None else "none"
        print(f"\tTopic: {description.name}\tPartition: {p.id}\tLeader: {leader}\t"
              f"Replicas: {','.join(str(n.id) for n in p.replicas)}\t"
              f"Isr: {','.join(str(n.id) for n in p.isr)}")
