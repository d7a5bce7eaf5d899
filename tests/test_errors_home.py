"""tierlog.errors is the one home of the library's exception classes.

The manager's two topic errors used to be defined in tierlog.manager.log_manager; they now live in
tierlog.errors and stay importable from tierlog.manager.log_manager (the same class objects), so
callers catching either spelling keep working. A scan of the package keeps new error classes from
being defined anywhere else.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import tierlog
import tierlog.plugins
from tierlog import errors
from tierlog.manager import log_manager as manager

#: Exception classes deliberately defined elsewhere, and why.
ALLOWED_ELSEWHERE = {
    # A command-line usage mistake printed as one line; not part of the library's tree.
    ("cli/_common.py", "CliError"),
    # The CLI's SIGTERM twin of KeyboardInterrupt (a BaseException for control flow, exit 143).
    ("cli/_common.py", "Terminated"),
    # Private to the checkpoint parser, always turned into CorruptCheckpointError.
    ("checkpoint/checkpoint_file.py", "_MalformedLine"),
}

#: Names a class statement inherits from when it defines an exception: every builtin exception
#: and every class of tierlog.errors.
_EXCEPTION_BASES = {
    name for namespace in (vars(builtins), vars(errors)) for name, value in namespace.items()
    if isinstance(value, type) and issubclass(value, BaseException)}


@pytest.mark.parametrize("name", ["UnknownTopicOrPartitionError", "TopicExistsError"])
def test_topic_errors_live_in_errors_and_are_reexported_by_manager(name: str) -> None:
    cls = getattr(errors, name)
    assert cls.__module__ == "tierlog.errors"
    assert getattr(manager, name) is cls
    assert issubclass(cls, errors.TierlogError)


def test_topic_errors_keep_their_builtin_bases_and_messages() -> None:
    unknown = errors.UnknownTopicOrPartitionError("unknown topic 'orders'")
    assert isinstance(unknown, KeyError)
    assert str(unknown) == "unknown topic 'orders'"  # not KeyError's repr() of the message
    assert str(errors.UnknownTopicOrPartitionError()) == ""
    exists = errors.TopicExistsError("topic 'orders' already exists")
    assert isinstance(exists, ValueError)
    assert str(exists) == "topic 'orders' already exists"


def test_manager_raises_the_errors_module_classes(tmp_path: Path) -> None:
    with manager.LogManager.open([tmp_path], start_scheduler=False) as mgr:
        mgr.create_topic("orders", 1)
        with pytest.raises(errors.TopicExistsError, match="orders"):
            mgr.create_topic("orders", 1)
        with pytest.raises(errors.UnknownTopicOrPartitionError, match="missing"):
            mgr.log("missing", 0)


def _exception_classes_outside_errors() -> list[tuple[str, str]]:
    roots = [Path(tierlog.__file__).parent, *map(Path, tierlog.plugins.__path__)]
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path == Path(errors.__file__):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                         for b in node.bases}
                if bases & _EXCEPTION_BASES:
                    found.append((path.relative_to(root).as_posix(), node.name))
    return found


def test_no_exception_class_is_defined_outside_errors() -> None:
    stray = [entry for entry in _exception_classes_outside_errors()
             if entry not in ALLOWED_ELSEWHERE]
    assert stray == [], f"define exception classes in tierlog/errors.py, not in {stray}"


def test_the_scan_sees_the_allowed_exceptions() -> None:
    # Guards the scan itself: if it found nothing it would pass vacuously.
    assert set(_exception_classes_outside_errors()) >= ALLOWED_ELSEWHERE
