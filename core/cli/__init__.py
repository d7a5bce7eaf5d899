"""The ``tierlog`` command line: one module per subcommand, Kafka's names for options and
settings. A user mistake prints one line (``tierlog: error: ...``) and exits 1; usage errors 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from tierlog.cli import (
    consume,
    demo,
    dump_log,
    metrics,
    plugins,
    produce,
    restore,
    scrub,
    serve,
    tier,
    topics,
)
from tierlog.cli._common import CliError, add_global_options, common_parser, verbosity
from tierlog.errors import TierlogError

#: Exit status of a command that failed on the user's input, config or data.
EXIT_ERROR = 1
#: Exit status on Ctrl-C, as a shell reports SIGINT.
EXIT_INTERRUPTED = 130

COMMANDS = (produce, consume, topics, tier, restore, dump_log, plugins, demo, serve, scrub,
            metrics)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="Kafka's storage engine in Python, with tiered storage: produce, consume, "
                    "manage topics, tier segments and inspect log files from the shell.",
        epilog="Run 'tierlog COMMAND --help' for a command's options.",
    )
    add_global_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    for command in COMMANDS:
        command.add_parser(sub, common)
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


def _fail(message: str) -> int:
    sys.stderr.write(f"tierlog: error: {message}\n")
    return EXIT_ERROR


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
