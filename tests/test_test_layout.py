"""No file under tests/ imports a test module (issue 22): a helper two test modules share lives in
tests/support (importable as ``support``), a fixture two modules of a room share in the room's
conftest.py. Importing ``test_x`` couples the files, hides the shared code among the tests and
runs the other module's code a second time under another name.

The scan reads every file with ``ast``: ``import a.test_b``, ``from test_b import x``,
``from a import test_b`` and ``importlib.import_module("test_b")`` with a literal name, at
module level or inside functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imports_of_test_modules(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) of each import of a test module (a dotted name with a ``test_*`` part)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_test_module(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if _is_test_module(module):
                yield node.lineno, f"from {module} import ..."
            for alias in node.names:
                if alias.name.startswith("test_"):
                    yield node.lineno, f"from {module} import {alias.name}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and _is_test_module(node.args[0].value)):
            yield node.lineno, f"import_module({node.args[0].value!r})"


def test_no_file_under_tests_imports_a_test_module() -> None:
    found = [f"{path.relative_to(TESTS)}:{line}: {what}"
             for path in sorted(TESTS.rglob("*.py"))
             for line, what in imports_of_test_modules(path.read_text(encoding="utf-8"))]
    assert not found, (
        "test modules are not libraries: move the shared helper to tests/support (a fixture "
        "to the room's conftest.py) and import it from there:\n" + "\n".join(found))


@pytest.mark.parametrize(("source", "what"), [
    ("from test_restore import Source", "from test_restore import ..."),
    ("from remote.test_restore import tier_config", "from remote.test_restore import ..."),
    ("import test_plugin_key_index", "import test_plugin_key_index"),
    ("import remote.test_restore as restore", "import remote.test_restore"),
    ("from remote import test_restore", "from remote import test_restore"),
    ("def f():\n    from test_compaction import Workload", "from test_compaction import ..."),
    ("import importlib\nimportlib.import_module('test_restore')", "import_module('test_restore')"),
])
def test_the_scan_finds_every_form_of_import(source: str, what: str) -> None:
    assert [w for _, w in imports_of_test_modules(source)] == [what]


def test_the_scan_lets_support_and_libraries_through() -> None:
    source = ("import pytest\nfrom support.restore_world import Source\n"
              "from tierlog.remote.ops import backfill\nimport contest_x\n")
    assert list(imports_of_test_modules(source)) == []
