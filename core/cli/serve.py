"""``tierlog serve``: a single-node Kafka broker over the data dirs (Kafka's wire protocol).

Settings come as Kafka's ``server.properties`` (``--config``) and ``--set key=value``:
``listeners``, ``advertised.listeners``, ``node.id``, ``log.dirs``,
``socket.request.max.bytes``, ``auto.create.topics.enable`` and every LogManager setting.
SIGTERM or SIGINT stops it cleanly (the LogManager writes the clean-shutdown marker). The
bound address is logged and, with ``--port-file``, written there (atomically) once the
server accepts connections; ``--listeners-file`` writes every listener's bound address as JSON
(``{"SSL": {"host": ..., "port": ..., "security_protocol": "SSL"}, ...}``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from tierlog.cli._common import (
    DEFAULT_DATA_DIR,
    Subcommands,
    add_metrics_port,
    metrics_served,
    parse_assignments,
    read_properties,
    verbosity,
)
from tierlog.common.atomic import atomic_write_text
from tierlog.manager.log_manager import LogManager
from tierlog.server.config import ServerConfig
from tierlog.server.server import Server

log = logging.getLogger(__name__)


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "serve", parents=[common],
        help="serve the data dirs to Kafka clients (Kafka's wire protocol)",
        description="Run a single-node Kafka broker over the data dirs: Kafka clients "
                    "(kafka-python, aiokafka, librdkafka, the Java client) produce, consume "
                    "and manage topics. Settings in Kafka's names, e.g. --set "
                    "listeners=PLAINTEXT://127.0.0.1:9092. Stops cleanly on SIGTERM/SIGINT.")
    parser.add_argument("--port-file", metavar="PATH",
                        help="write HOST:PORT of the bound listener here once serving "
                             "(useful with port 0, an ephemeral port)")
    parser.add_argument("--listeners-file", metavar="PATH",
                        help="write every listener's bound address here once serving, as "
                             "JSON: {NAME: {host, port, security_protocol}}")
    add_metrics_port(parser)
    parser.set_defaults(func=run)


def server_config(args: argparse.Namespace) -> ServerConfig:
    """Merge --config, --set (either side of the subcommand) and --data-dir into a
    ServerConfig (ConfigError naming any bad key)."""
    values: dict[str, Any] = {}
    config_arg = getattr(args, "config", None) or getattr(args, "global_config", None)
    if config_arg:
        values.update(read_properties(config_arg))
    values.update(parse_assignments(getattr(args, "global_set", None)))
    values.update(parse_assignments(getattr(args, "set", None)))
    data_dir = getattr(args, "data_dir", None) or getattr(args, "global_data_dir", None)
    if data_dir:
        values["log.dirs"] = data_dir
    if not values.get("log.dirs") and not values.get("log.dir"):
        values["log.dirs"] = DEFAULT_DATA_DIR
    return ServerConfig.from_properties(values)


async def serve(config: ServerConfig, manager: LogManager, *, port_file: Path | None = None,
                stop: asyncio.Event | None = None, metrics_port: int | None = None,
                metrics_host: str = "127.0.0.1", listeners_file: Path | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when run from the command line), with
    the storage and broker metrics on ``metrics_host:metrics_port`` if a port is given."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(signum, stop.set)
    server = Server(config, manager)
    # The metrics endpoint binds first: a taken port fails before the listener opens.
    with metrics_served(manager, metrics_port, metrics_host, server=server):
        await server.start()
        address = f"{server.host}:{server.port}"
        log.info("tierlog serving Kafka clients on %s", address)
        if listeners_file is not None:
            atomic_write_text(listeners_file, json.dumps({
                listener.name: {"host": server.bound[listener.name][0],
                                "port": server.bound[listener.name][1],
                                "security_protocol": listener.security_protocol}
                for listener in config.listeners}))
        if port_file is not None:  # last: a waiter on it finds the listeners file too
            atomic_write_text(port_file, address)
        try:
            await stop.wait()
        finally:
            log.info("tierlog server stopping")
            await server.stop()


def run(args: argparse.Namespace) -> int:
    # A broker logs at INFO, as Kafka's server.log does (its start, stop and the connections
    # it closes); -vv adds DEBUG.
    logging.getLogger().setLevel(logging.DEBUG if verbosity(args) >= 2 else logging.INFO)
    config = server_config(args)
    for directory in config.log_dirs:
        directory.mkdir(parents=True, exist_ok=True)
    manager = LogManager.open(list(config.log_dirs), config.manager)
    try:
        asyncio.run(serve(config, manager,
                          port_file=Path(args.port_file) if args.port_file else None,
                          metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                          listeners_file=(Path(args.listeners_file) if args.listeners_file
                                          else None)))
    finally:
        manager.close()
    sys.stderr.flush()
    return 0
