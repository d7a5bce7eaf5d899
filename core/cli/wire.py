"""The CLI's Kafka clients: ``--bootstrap-server`` (and Kafka's ``--command-config``) on a
command, confluent-kafka's AdminClient, Producer and Consumer made from them, and a broker's
error as one line. They work against any Kafka-compatible broker, tierlog's own or not.

confluent-kafka (librdkafka) is the optional extra ``tierlog[cli]``: the data-dir commands and
the library do not need it, so it is imported only when a command talks to a broker.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.cli._common import CliError, read_properties

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient

#: How long one admin request (or a producer's final flush) may take before the command fails.
REQUEST_TIMEOUT_S = 30.0
#: librdkafka's own log lines go here (shown with -vv), not straight to stderr.
LIBRDKAFKA_LOG = logging.getLogger("tierlog.cli.librdkafka")
#: Options of the data-dir mode that mean nothing to a broker.
_LOCAL_OPTIONS = (("data_dir", "--data-dir"), ("global_data_dir", "--data-dir"),
                  ("config", "--config"), ("global_config", "--config"),
                  ("set", "--set"), ("global_set", "--set"))

_Client = TypeVar("_Client")
_Answer = TypeVar("_Answer")


def add_bootstrap_options(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--bootstrap-server`` and ``--command-config``, Kafka's tools' names."""
    group = parser.add_argument_group("broker options (instead of a data dir)")
    group.add_argument("--bootstrap-server", metavar="HOST:PORT", required=required,
                       help="talk to this Kafka-compatible broker (tierlog serve or any other) "
                            "through the Kafka protocol instead of opening a data dir"
                       + ("" if required else "; without it the command works on local logs"))
    group.add_argument("--command-config", metavar="FILE",
                       help="a .properties file of client settings (security.protocol, "
                            "sasl.mechanism, ...), passed to the client as they are")


def uses_broker(args: argparse.Namespace) -> bool:
    """Whether the command talks to a broker; then the data-dir options are refused."""
    if getattr(args, "bootstrap_server", None) is None:
        return False
    for dest, option in _LOCAL_OPTIONS:
        if getattr(args, dest, None):
            raise CliError(f"{option} is for local logs; it cannot go with --bootstrap-server "
                           "(client settings go in --command-config FILE)")
    return True


def client_config(args: argparse.Namespace, **settings: object) -> dict[str, Any]:
    """The client's settings: the bootstrap server, the --command-config file, then ours."""
    bootstrap = args.bootstrap_server
    if not bootstrap or ":" not in bootstrap:
        raise CliError(f"--bootstrap-server expects HOST:PORT, got {bootstrap!r}")
    from_file: Mapping[str, str] = {}
    if args.command_config:
        from_file = read_properties(args.command_config)
    return {"bootstrap.servers": bootstrap, **from_file, "logger": LIBRDKAFKA_LOG, **settings}


def kafka() -> ModuleType:
    """The confluent_kafka module, or a CliError saying how to install it."""
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        raise CliError("--bootstrap-server needs the Kafka client library confluent-kafka: "
                       "pip install 'tierlog[cli]'") from None
    return confluent_kafka


def admin_client(args: argparse.Namespace) -> AdminClient:
    kafka()  # installed, or a CliError saying how to install it
    from confluent_kafka.admin import AdminClient

    return _client(AdminClient, client_config(args), args)


def producer(args: argparse.Namespace, **settings: object) -> Producer:
    kafka()
    from confluent_kafka import Producer

    return _client(Producer, client_config(args, **settings), args)


def consumer(args: argparse.Namespace, **settings: object) -> Consumer:
    kafka()
    from confluent_kafka import Consumer

    return _client(Consumer, client_config(args, **settings), args)


def _client(make: Callable[[dict[str, Any]], _Client], config: dict[str, Any],
            args: argparse.Namespace) -> _Client:
    """A client, or a CliError when librdkafka refuses a setting (of --command-config).
    ``config``'s values are librdkafka's (each client's stub types them differently)."""
    try:
        return make(config)
    except kafka().KafkaException as exc:
        source = f"--command-config {args.command_config}: " if args.command_config else ""
        raise CliError(f"{source}{describe_error(exc.args[0])}") from None


def describe_error(error: KafkaError) -> str:
    """A KafkaError as ``its message (ITS_NAME)``."""
    text, name = error.str(), error.name()
    return f"{text} ({name})" if name and name not in text else text


def result(future: concurrent.futures.Future[_Answer], what: str) -> _Answer:
    """An admin request's answer, or a CliError naming ``what`` failed and the broker's
    reason (or that it did not answer in time)."""
    try:
        return future.result(REQUEST_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        raise CliError(f"{what}: no answer from the broker in {REQUEST_TIMEOUT_S:.0f} s (is "
                       "--bootstrap-server right, and the broker up?)") from None
    except kafka().KafkaException as exc:
        raise CliError(f"{what}: {describe_error(exc.args[0])}") from None


def check(error: KafkaError | None, what: str) -> None:
    """A CliError for a KafkaError carried by a result (a partition's, a topic's), if any."""
    if error is not None and error.code() != 0:
        raise CliError(f"{what}: {describe_error(error)}")


def topic_partitions(client: AdminClient | Producer | Consumer, topic: str) -> list[int]:
    """The partitions of ``topic`` from the broker's metadata; CliError if it has none (a
    broker with auto.create.topics.enable creates it here, as for Kafka's console tools)."""
    meta = client.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        reason = describe_error(meta.error) if meta is not None and meta.error else "no metadata"
        raise CliError(f"unknown topic {topic!r}: {reason}")
    return sorted(meta.partitions)
