"""The ``tierlog`` command line: one module per subcommand, Kafka's names for options and
settings. A user mistake prints one line (``tierlog: error: ...``) and exits 1; usage errors 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tierlog.cli._common import (
    CliError,
    Terminated,
    add_global_options,
    common_parser,
    verbosity,
)
from tierlog.errors import CorruptRecordError, TierlogError

#: Exit status of a command that failed on the user's input, config or data.
EXIT_ERROR = 1
#: Exit status on Ctrl-C, as a shell reports SIGINT.
EXIT_INTERRUPTED = 130
#: Exit status on SIGTERM where a command stops on it cleanly (128 + 15, as a shell reports it).
EXIT_TERMINATED = 143

#: Each command: its name, its module in tierlog.cli (an ``add_parser(sub, common)`` that gives
#: it ``func``) and the line ``tierlog --help`` shows. A module is imported only when its
#: command runs or shows its own help, so ``tierlog --help`` loads no engine or server.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("produce", "produce", "append lines or JSON records to a topic"),
    ("consume", "consume", "print a topic's records"),
    ("topics", "topics", "create, list, describe, alter or delete topics"),
    ("groups", "groups", "list, describe, reset the offsets of or delete consumer groups"),
    ("acls", "acls", "add, remove or list a broker's ACLs (Kafka's kafka-acls.sh)"),
    ("tier", "tier", "copy closed segments to the remote tier now"),
    ("restore", "restore", "rebuild topics from the remote tier"),
    ("dump-log", "dump_log",
     "print segment, index and snapshot files (Kafka's kafka-dump-log.sh)"),
    ("plugins", "plugins", "list plugins and the hooks they implement"),
    ("demo", "demo", "run the end-to-end tiered storage demo"),
    ("serve", "serve", "serve the data dirs to Kafka clients (Kafka's wire protocol)"),
    ("scrub", "scrub", "check (and repair) a remote tier"),
    ("table", "table", "build or show a topic's Iceberg table in the tier"),
    ("metrics", "metrics", "print a snapshot of the storage metrics"),
)


class _LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The subcommands: a placeholder parser per command until it is chosen, then the
    command's module is imported and builds its real parser in the placeholder's place."""

    common: argparse.ArgumentParser
    modules: dict[str, str]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        assert isinstance(values, list)  # nargs=PARSER: the command's name, then its arguments
        name = values[0]
        if name in self.modules:
            module = importlib.import_module(f"tierlog.cli.{self.modules.pop(name)}")
            del self._name_parser_map[name]
            listed = list(self._choices_actions)  # COMMANDS' line stays the one listed
            module.add_parser(self, self.common)
            self._choices_actions[:] = listed
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="Kafka's storage engine in Python, with tiered storage: produce, consume, "
                    "manage topics, tier segments and inspect log files from the shell.",
        epilog="Run 'tierlog COMMAND --help' for a command's options.",
    )
    add_global_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                action=_LazyCommands)
    assert isinstance(sub, _LazyCommands)
    sub.common = common_parser()
    sub.modules = {name: module for name, module, _help in COMMANDS}
    for name, _module, help_line in COMMANDS:
        sub.add_parser(name, help=help_line)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(verbosity(args), 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return command(args)
    except CorruptRecordError as exc:
        return _fail(_with_next_step(exc))
    except (TierlogError, CliError) as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # `tierlog consume ... | head`: the reader left; not an error
        _silence_stdout()
        return 0
    except OSError as exc:  # a missing or unreadable file named by the user
        return _fail(_describe_os_error(exc))
    except ImportError as exc:  # an optional dependency (pyspark, s3fs) that is not installed
        return _fail(f"{exc} (install the matching extra, e.g. pip install 'tierlog[spark,s3]')")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Terminated:
        return EXIT_TERMINATED


def _fail(message: str) -> int:
    sys.stderr.write(f"tierlog: error: {message}\n")
    return EXIT_ERROR


def _with_next_step(exc: CorruptRecordError) -> str:
    """The damage error, and what to run next to see how far the damage goes: dump-log on a
    local segment file, a deep scrub of the remote tier otherwise."""
    message = str(exc)
    if "tierlog dump-log" in message:  # the error says what to run already
        return message
    if exc.file is not None and os.path.isfile(exc.file):
        return (f"{message}; check the file with 'tierlog dump-log --verify {exc.file}' and, "
                f"for a tiered topic, the tier with 'tierlog scrub --deep URL'")
    return (f"{message}; check the tier with 'tierlog scrub --deep URL' (a local segment "
            f"with 'tierlog dump-log --verify FILE')")


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
