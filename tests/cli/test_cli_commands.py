"""The ``tierlog`` command table: ``tierlog --help`` builds its parser without importing a
command's module (no engine, server or remote tier: it used to take half a second), and each
command's line in the table is the help its module gives."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from tierlog.cli import COMMANDS

#: Modules ``tierlog --help`` must not load.
HEAVY = ("tierlog.manager.log_manager", "tierlog.server", "tierlog.log.log", "fsspec", "confluent_kafka")


def test_help_imports_no_engine_server_or_client_library() -> None:
    code = ("import sys\n"
            "from tierlog.cli import build_parser\n"
            "build_parser().format_help()\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_a_command_loads_its_own_module_only() -> None:
    code = ("import sys\n"
            "from tierlog.cli import build_parser\n"
            "build_parser().parse_args(['groups', '--list', '--bootstrap-server', 'h:1'])\n"
            "import json\n"
            "print(json.dumps([m for m in sys.modules if m.startswith('tierlog.cli.')]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded = json.loads(out)
    assert "tierlog.cli.groups" in loaded
    assert not {"tierlog.cli.serve", "tierlog.cli.demo", "tierlog.cli.topics"} & set(loaded)


@pytest.mark.parametrize(("name", "module", "line"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_the_table_lists_each_commands_own_help(name: str, module: str, line: str) -> None:
    parser = argparse.ArgumentParser(prog="tierlog")
    sub = parser.add_subparsers()
    importlib.import_module(f"tierlog.cli.{module}").add_parser(
        sub, argparse.ArgumentParser(add_help=False))
    helps = {action.dest: action.help for action in sub._choices_actions}
    assert helps == {name: line}
