"""What every ``tierlog`` subcommand shares: the global options, Kafka ``.properties`` files,
``--set`` overrides, the data directories and opening a LogManager on them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tierlog.common import properties
from tierlog.common.secrets import is_secret
from tierlog.errors import PropertiesError, TierlogError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from tqdm import tqdm

    from tierlog.manager.log_manager import LogManager
    from tierlog.server.server import Server

#: Where the logs live when neither --data-dir nor ``log.dirs`` says.
DEFAULT_DATA_DIR = "tierlog-data"
#: Read from the first data directory when --config is not given (the demo writes one).
DATA_DIR_CONFIG = "server.properties"
#: Kafka's broker keys naming the log directories; the CLI resolves them, not ManagerConfig.
LOG_DIRS_KEYS = ("log.dirs", "log.dir")

#: The ``tierlog`` subcommands (``parser.add_subparsers()``), which each command module's
#: ``add_parser(sub, common)`` adds its parser to. A string: argparse's class is not generic at
#: run time.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A user mistake the command line reports as one line (``tierlog: error: ...``)."""


class Terminated(BaseException):
    """SIGTERM reached a command that stops on it as on Ctrl-C (:func:`sigterm_stops`): its
    ``finally`` blocks run (a consumer leaves its group, the count is printed), then the
    command exits 143 (128 + SIGTERM, as a shell reports it)."""


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread, as
    SIGINT raises KeyboardInterrupt; the previous handler is put back on the way out."""
    import signal

    def terminate(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool,
                       config_file: bool = True) -> None:
    """--data-dir, --config, --set and -v, accepted before and after the subcommand.

    Defaults are suppressed so a value given on one side is not reset by the other; the
    top-level copies land in ``global_*`` attributes and are merged by :func:`settings`.
    ``config_file=False`` leaves ``--config`` to the subcommand (``topics --config k=v``).
    """
    prefix = "global_" if top_level else ""
    group = parser.add_argument_group("global options")
    group.add_argument("--data-dir", dest=prefix + "data_dir", metavar="DIR",
                       default=argparse.SUPPRESS,
                       help=f"log directory, or a comma-separated list (default: log.dirs from "
                            f"the config, else ./{DEFAULT_DATA_DIR})")
    if config_file:
        group.add_argument("--config", dest=prefix + "config", metavar="FILE",
                           default=argparse.SUPPRESS,
                           help=f"Kafka-style .properties file with broker and topic-default "
                                f"settings (default: <data-dir>/{DATA_DIR_CONFIG} if present)")
    group.add_argument("--set", dest=prefix + "set", metavar="KEY=VALUE", action="append",
                       default=argparse.SUPPRESS,
                       help="a setting that overrides the config file (repeatable)")
    group.add_argument("-v", "--verbose", dest=prefix + "verbose", action="count",
                       default=argparse.SUPPRESS, help="log more (-v info, -vv debug)")


def common_parser(*, config_file: bool = True) -> argparse.ArgumentParser:
    """The parent parser that gives a subcommand the global options."""
    parser = argparse.ArgumentParser(add_help=False)
    add_global_options(parser, top_level=False, config_file=config_file)
    return parser


def verbosity(args: argparse.Namespace) -> int:
    return getattr(args, "global_verbose", 0) + getattr(args, "verbose", 0)


def parse_assignment(text: str, what: str = "--set") -> tuple[str, str]:
    """``key=value`` -> (key, value); the key must not be empty."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        # The text may be a storage secret with a mistyped separator: never echo one.
        shown = "a text naming a secret (not shown)" if is_secret(text) else repr(text)
        raise CliError(f"{what} expects KEY=VALUE, got {shown}")
    return key.strip(), value.strip()


def parse_assignments(items: Sequence[str] | None, what: str = "--set") -> dict[str, str]:
    return dict(parse_assignment(item, what) for item in items or ())


# -- .properties files: tierlog.common.properties is the one home of the format -------------------


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Kafka ``.properties`` file (see :mod:`tierlog.common.properties`), errors as CliError."""
    try:
        return properties.read_properties(path)
    except PropertiesError as e:
        raise CliError(f"config file {e}") from None


# -- settings and the log manager ----------------------------------------------------------


class Settings:
    """The resolved global options: data directories and the flat config dict (validated
    by ManagerConfig, so a ConfigError names any bad key before anything is opened)."""

    def __init__(self, data_dirs: list[Path], config: dict[str, str]) -> None:
        self.data_dirs = data_dirs
        self.config = config
        from tierlog.manager.manager_config import ManagerConfig  # loads the tier; not for --help

        self.manager_config = ManagerConfig(config)


def settings(args: argparse.Namespace, default_data_dir: str = DEFAULT_DATA_DIR,
             extra: Mapping[str, Any] | None = None, *,
             read_data_dir_config: bool = True) -> Settings:
    """Merge --config, --set (both sides of the subcommand) and --data-dir; ``extra``
    settings apply under the user's. Without --config, ``<data-dir>/server.properties`` is
    read if present (unless ``read_data_dir_config`` is False)."""
    overrides = parse_assignments(getattr(args, "global_set", None))
    overrides.update(parse_assignments(getattr(args, "set", None)))
    data_dir_arg = getattr(args, "data_dir", None) or getattr(args, "global_data_dir", None)
    config_arg = getattr(args, "config", None) or getattr(args, "global_config", None)
    from_file: dict[str, str] = {}
    if config_arg:
        from_file = read_properties(config_arg)
    dirs_text = data_dir_arg or _log_dirs({**from_file, **overrides}) or default_data_dir
    data_dirs = [Path(d.strip()) for d in dirs_text.split(",") if d.strip()]
    if not data_dirs:
        raise CliError("--data-dir names no directory")
    if not config_arg and read_data_dir_config and (data_dirs[0] / DATA_DIR_CONFIG).is_file():
        from_file = read_properties(data_dirs[0] / DATA_DIR_CONFIG)
    config = {**(extra or {}), **from_file, **overrides}
    for key in LOG_DIRS_KEYS:
        config.pop(key, None)
    return Settings(data_dirs, config)


def _log_dirs(config: Mapping[str, str]) -> str | None:
    for key in LOG_DIRS_KEYS:
        if config.get(key):
            return config[key]
    return None


def require_existing(dirs: Sequence[Path]) -> None:
    """Commands that only read must not create an empty data directory by mistake."""
    for d in dirs:
        if not d.is_dir():
            raise CliError(f"data directory {d} does not exist (pass --data-dir, or create a "
                           f"topic first with: tierlog topics --create)")


@contextmanager
def open_manager(st: Settings, *, must_exist: bool = True,
                 read_only: bool = False) -> Iterator[LogManager]:
    """A LogManager on the data dirs with no background thread (a command runs its work
    itself); closed cleanly on the way out so the next open skips recovery. It holds the
    dirs' locks (DataDirLockedError when a live process owns one). ``read_only`` (the
    commands that only read: they work beside a live owner) writes nothing at all, and
    a read reaching damaged bytes fails naming them (LogDamagedError) instead of cutting
    them as recovery would."""
    from tierlog.manager.log_manager import (
        LogManager,  # the engine loads when logs open, not for --help
    )

    if must_exist:
        require_existing(st.data_dirs)
    mgr = LogManager.open(st.data_dirs, st.config, start_scheduler=False, read_only=read_only)
    try:
        yield mgr
    finally:
        mgr.close()


@contextmanager
def holding_warnings() -> Iterator[list[logging.LogRecord]]:
    """Hold back the warnings and errors ``tierlog`` logs while the block runs, and log them
    on the way out. The block gets the list that collects them and takes out those its own
    output already says (the one home of this hold for every command)."""
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and record.name.startswith("tierlog."):
            held.append(record)
            return False
        return True

    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(hold)
    try:
        yield held
    finally:
        for handler in handlers:
            handler.removeFilter(hold)
        for record in held:
            logging.getLogger(record.name).handle(record)


@contextmanager
def warnings_dropped_on_error() -> Iterator[None]:
    """Hold back the warnings ``tierlog`` logs while the block runs: printed on the way out
    when it succeeds, dropped when it raises a TierlogError, whose one ``tierlog: error:``
    line says it all (a read of damaged bytes would otherwise print the damage four times:
    the scan, the segment, the partition, the load's summary, then the error)."""
    with holding_warnings() as held:
        try:
            yield
        except TierlogError:
            held.clear()
            raise


def add_metrics_port(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--metrics-host``: serve the metrics while a long-running
    command runs."""
    parser.add_argument("--metrics-port", type=int, metavar="PORT", default=None,
                        help="serve Prometheus metrics at http://HOST:PORT/metrics while "
                             "the command runs (0: a free port, logged)")
    parser.add_argument("--metrics-host", metavar="HOST", default="127.0.0.1",
                        help="the address the metrics endpoint listens on (default "
                             "127.0.0.1, loopback; 0.0.0.0: every interface)")


@contextmanager
def metrics_served(mgr: LogManager, port: int | None, host: str = "127.0.0.1", *,
                   server: Server | None = None) -> Iterator[None]:
    """Serve ``mgr``'s metrics (and ``server``'s) on ``host:port`` for the duration, if a
    port is given. The address is logged at INFO; a command that does not show INFO (all
    but ``serve`` without -v) prints it on stderr instead, once: the user asked for it
    (port 0 picks one), and a WARNING line is for trouble, not start-up information."""
    if port is None:
        yield
        return
    if not 0 <= port <= 65535:
        raise CliError(f"--metrics-port must be 0-65535, got {port}")
    from tierlog.plugins.metrics import serve_metrics

    served = serve_metrics(mgr, port, host, server=server)
    if not logging.getLogger().isEnabledFor(logging.INFO):  # its INFO line is not shown
        print(f"tierlog: metrics on {served.url}", file=sys.stderr)  # the address asked for
    try:
        yield
    finally:
        served.close()


def topic_partitions(mgr: LogManager, topic: str, partition: int | None = None) -> list[int]:
    """The partitions to work on: all of ``topic``'s, or the one asked for (checked)."""
    partitions = mgr.partitions(topic)
    if not partitions:
        known = ", ".join(mgr.topics()) or "none"
        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} (topics: {known})")
    if partition is None:
        return partitions
    if partition not in partitions:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has no partition {partition} (partitions 0-{partitions[-1]})")
    return [partition]


def progress_bar(*, desc: str | None = None, unit: str = "it", total: int | None = None,
                 unit_scale: bool = False, quiet: bool = False) -> tqdm[Any]:
    """The CLI's one kind of progress bar: on stderr, and only when stderr is a terminal
    (tqdm's ``disable=None``) and ``quiet`` is not set, so a log file or a pipe gets none.
    ``desc``, ``unit``, ``total`` and ``unit_scale`` are tqdm's (and its defaults)."""
    from tqdm import tqdm  # not for --help

    return tqdm(file=sys.stderr, disable=True if quiet else None, desc=desc, unit=unit,
                total=total, unit_scale=unit_scale)


def offset_option(text: str) -> int:
    """A numeric ``--offset`` (what is left once 'earliest' and 'latest' are taken): a
    non-negative whole number, or a CliError naming what was given."""
    try:
        offset = int(text)
    except ValueError:
        raise CliError(f"--offset must be a number, 'earliest' or 'latest', got {text!r}"
                       ) from None
    if offset < 0:
        raise CliError(f"--offset must not be negative, got {offset}")
    return offset


def plural(n: int, word: str) -> str:
    """``plural(1, "segment")`` -> '1 segment'; otherwise '3 segments'."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB"):
        size /= 1024
        if size < 1024:
            return f"{size:,.1f} {unit}"
    return f"{size / 1024:,.1f} GiB"
