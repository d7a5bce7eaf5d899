"""The demo's last step: serve the demo topic with Kafka's protocol for a moment and read it
with a Kafka client (kafka-python, a dev dependency: skipped with a note when missing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tierlog.server.background import BackgroundServer


def serve_and_consume(dirs: Sequence[Path], config: dict[str, Any], topic: str,
                      count: int = 5, echo: Callable[[str], None] = print) -> bool:
    """Start a server on an ephemeral port over ``dirs``, consume ``count`` records of
    ``topic``-0 from offset 0 (served from the remote tier when tiered) with kafka-python,
    stop. False when a record could not be read."""
    try:
        from kafka import KafkaConsumer, TopicPartition
    except ImportError:
        echo("\nKafka client step skipped: kafka-python is not installed "
             "(pip install kafka-python), serve the topic with: tierlog serve")
        return True
    server = BackgroundServer({**config, "log.dirs": ",".join(str(d) for d in dirs),
                               "listeners": "PLAINTEXT://127.0.0.1:0"})
    with server:
        bootstrap = server.bootstrap
        echo(f"\nServing {topic!r} with Kafka's protocol on {bootstrap} (tierlog serve); "
             f"a kafka-python consumer reads partition 0 from offset 0:")
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 enable_auto_commit=False, consumer_timeout_ms=10_000)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got = 0
        for message in consumer:
            echo(f"  offset {message.offset}: key={message.key!r} "
                 f"value={bytes(message.value or b'')[:40]!r}")
            got += 1
            if got >= count:
                break
        consumer.close()
        return got >= count
