"""The package's layers (issue 22): every module imports, no module imports upward through the
rooms, no module outside ``tierlog.log`` touches a Log's private names, and no import ring
(type-only imports included) is left inside the log's rooms or the remote room.

The order of the rooms is stated once, in ``LAYERS``; everything else is read from the source
with ``ast``: module-level imports, those under ``if TYPE_CHECKING:``, those inside functions,
``importlib.import_module("tierlog....")`` with a literal name, and a package ``__init__``'s
lazy re-exports (the values of its ``_EXPORTS`` table, PEP 562). Those lazy re-exports are
imports like any other: a package ``__init__`` belongs to its room, so re-exporting its own
room is free, and anything else it re-exports is checked. ``tierlog/__init__.py``, the front
door, re-exports from every room and so sits at the top; ``import tierlog`` alone (the front
door, which loads nothing eagerly) is free, and ``from tierlog import X`` inside the package is
checked against the room X really comes from. Built-in plugins loaded by name from the plugin
manager's ``DEFAULT_PLUGINS`` are registrations (like entry points), not imports.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import tierlog
import tierlog.plugins

#: The rooms, bottom to top. An entry is a module name prefix; a module's room is its longest
#: matching prefix. A module may import its own level and the levels below it; rooms on one
#: level are peers. Only the order of the rooms the issue names is given by it (records ->
#: index -> log -> cleaner -> remote -> manager -> server/cli); the others are placed by what
#: they import and what imports them.
LAYERS: tuple[tuple[str, ...], ...] = (
    # The leaf helpers and the public surface every room may name.
    ("tierlog.errors", "tierlog.config", "tierlog.events", "tierlog.common"),
    ("tierlog.records",),
    # The plugin surface: the contracts plugins implement (as Kafka's storage/api sits below
    # storage and names the records of clients), the hook specs that name them and the plugin
    # host whose registries they type. Every room that runs plugins sits above it.
    ("tierlog.contracts", "tierlog.hookspecs", "tierlog.plugin_manager"),
    ("tierlog.index",),
    # The partition directory's files and the producer state: what the log is built from.
    ("tierlog.checkpoint", "tierlog.producer"),
    ("tierlog.log",),
    ("tierlog.cleaner",),
    ("tierlog.remote",),
    ("tierlog.cluster",),  # cluster metadata kept in the tier's object store (issue 24)
    # Listeners, TLS, SASL and ACLs (issue 25): credentials and ACLs live in the cluster store.
    ("tierlog.security",),
    # Readers of the tier, and the remote storage plugins (they implement remote.api).
    ("tierlog.reader", "tierlog.plugins"),
    ("tierlog.spark",),
    ("tierlog.manager",),
    # The front door re-exports Log and LogManager; the metrics plugin observes the manager's
    # logs and the server's request and coordinator counters.
    ("tierlog.server", "tierlog.cli", "tierlog.plugins.metrics", "tierlog"),
)

#: Upward imports that remain, each with why. The test fails when one disappears, so this list
#: only shrinks. Keys are (importing module, imported module).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

#: Accesses of a Log's private names outside tierlog.log that remain, each with why:
#: "module: expression" -> reason. The test fails when one disappears.
KNOWN_PRIVATE: dict[str, str] = {}

#: Rooms that must hold no import ring, counting type-only imports (issue 22 item 2).
#: The log's rooms include the plugin surface and the base under them, so a ring through the
#: plugin host (log -> plugin_manager -> a contract naming Log) is found too.
RING_FREE_ROOMS: dict[str, tuple[str, ...]] = {
    "log": ("tierlog.log", "tierlog.producer", "tierlog.checkpoint", "tierlog.cleaner",
            "tierlog.index", "tierlog.records", "tierlog.contracts", "tierlog.hookspecs",
            "tierlog.plugin_manager", "tierlog.events", "tierlog.config", "tierlog.errors",
            "tierlog.common"),
    "remote": ("tierlog.remote",),
}

#: Rings that remain, each with why: the sorted members -> reason. The test fails when one is
#: broken, so this list only shrinks.
KNOWN_RINGS: dict[tuple[str, ...], str] = {}

#: Names (or attributes) that hold a Log, and the annotations that type one.
_LOG_NAMES = frozenset({"log", "_log"})
_LOG_TYPES = frozenset({"Log", "UnifiedLog"})


@dataclass(frozen=True)
class Import:
    """One import found in a module's source: the module it loads and where it is written."""

    source: str
    target: str
    line: int


@dataclass(frozen=True)
class ModuleSource:
    """One module of the package: its dotted name, its file and its parsed source."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def _package_roots() -> list[tuple[str, Path]]:
    """The package's source trees as installed (core/ is ``tierlog``, plugins/ is
    ``tierlog.plugins``), found through the import system, so the test follows a move."""
    return [("tierlog", Path(tierlog.__file__).parent),
            ("tierlog.plugins", Path(tierlog.plugins.__file__).parent)]


def _discover() -> dict[str, ModuleSource]:
    roots = _package_roots()
    nested = {path for _name, path in roots}
    modules: dict[str, ModuleSource] = {}
    for prefix, root in roots:
        for path in sorted(root.rglob("*.py")):
            if any(p != root and path.is_relative_to(p) for p in nested):
                continue  # another root owns it (plugins/ under core/ in a wheel)
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((prefix, *parts))
            modules[name] = ModuleSource(name, path, ast.parse(path.read_text(), str(path)))
    return modules


MODULES = _discover()


def room_of(module: str) -> str:
    """The LAYERS entry a module belongs to (its longest matching prefix)."""
    best = ""
    for level in LAYERS:
        for prefix in level:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best = prefix
    if not best:
        raise LookupError(f"{module} has no room in LAYERS")
    return best


def level_of(room: str) -> int:
    return next(i for i, level in enumerate(LAYERS) if room in level)


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    """A package __init__'s PEP 562 table: ``_EXPORTS = {"Name": "tierlog.module", ...}``."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets)):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values,
                                                    strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                    and isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return {}


def _resolve_from(package: str, name: str, modules: dict[str, ModuleSource]) -> str:
    """What ``from package import name`` loads: the submodule, the module a lazy re-export
    names, or the package itself."""
    if f"{package}.{name}" in modules:
        return f"{package}.{name}"
    if package in modules:
        exports = _lazy_exports(modules[package].tree)
        if name in exports:
            return exports[name]
    return package


def _absolute(module: ModuleSource, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _import_module_literal(node: ast.Call) -> str | None:
    """``importlib.import_module("tierlog.x")`` (or an f-string with a literal package)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if (isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant)
            and isinstance(arg.values[0].value, str)):
        return arg.values[0].value.rpartition(".")[0]  # f"tierlog.cli.{name}" -> tierlog.cli
    return None


def imports_of(module: ModuleSource, modules: dict[str, ModuleSource]) -> Iterator[Import]:
    """Every tierlog module ``module`` imports, wherever the import is written."""
    for node in ast.walk(module.tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            # `import tierlog` alone runs only the lazy front door
            targets = [a.name for a in node.names if a.name != "tierlog"]
        elif isinstance(node, ast.ImportFrom):
            package = _absolute(module, node)
            targets = [_resolve_from(package, a.name, modules) for a in node.names]
        elif isinstance(node, ast.Call):
            literal = _import_module_literal(node)
            targets = [literal] if literal else []
        for target in targets:
            if target == "tierlog" or target.startswith("tierlog."):
                yield Import(module.name, target, getattr(node, "lineno", 0))
    if module.is_package:
        for target in _lazy_exports(module.tree).values():
            yield Import(module.name, target, 0)


def upward_imports(modules: dict[str, ModuleSource]) -> dict[tuple[str, str], str]:
    """(module, imported) -> ``module -> imported (room A above room B)`` for each import of a
    room on a higher level than the importing module's."""
    found: dict[tuple[str, str], str] = {}
    for module in modules.values():
        source_room = room_of(module.name)
        for imp in imports_of(module, modules):
            target_room = room_of(imp.target)
            if level_of(target_room) > level_of(source_room):
                found[(imp.source, imp.target)] = (
                    f"{imp.source} -> {imp.target} "
                    f"({target_room} above {source_room}; line {imp.line})")
    return found


# -- a Log's private names ----------------------------------------------------------------------

def _names_log_type(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in _LOG_TYPES:
            return True
        if isinstance(node, ast.Attribute) and node.attr in _LOG_TYPES:
            return True
    return False


def _log_typed_names(tree: ast.AST) -> set[str]:
    """Parameters and variables annotated as a Log anywhere in the module (a heuristic: the
    same name in another function counts too, which errs towards reporting)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _names_log_type(node.annotation):
            names.add(node.arg)
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and _names_log_type(node.annotation)):
            names.add(node.target.id)
    return names


def _holds_log(expr: ast.expr, typed: set[str]) -> bool:
    """``log``, ``something_log``, ``self._log``, ``x.log`` or a name typed Log."""
    if isinstance(expr, ast.Name):
        return expr.id in _LOG_NAMES or expr.id.endswith("_log") or expr.id in typed
    if isinstance(expr, ast.Attribute):
        return expr.attr in _LOG_NAMES or expr.attr.endswith("_log")
    return False


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_log_accesses(module: ModuleSource) -> Iterator[str]:
    """``module: expr (line n)`` for each private name read or written on a Log."""
    typed = _log_typed_names(module.tree)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            if _holds_log(node.value, typed):
                yield f"{module.name}: {ast.unparse(node)}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "setattr", "hasattr"} and len(node.args) >= 2):
            obj, name = node.args[0], node.args[1]
            if (isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and _is_private(name.value) and _holds_log(obj, typed)):
                yield f"{module.name}: {ast.unparse(node)}"


def _outside_log(modules: dict[str, ModuleSource]) -> Iterable[ModuleSource]:
    return (m for m in modules.values() if room_of(m.name) != "tierlog.log")


# -- import rings -------------------------------------------------------------------------------

def import_rings(modules: dict[str, ModuleSource], prefixes: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected components of more than one module in the import graph of the
    modules under ``prefixes`` (every import counted, type-only ones included)."""

    def inside(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    graph: dict[str, set[str]] = defaultdict(set)
    for module in modules.values():
        if inside(module.name):
            graph[module.name].update(i.target for i in imports_of(module, modules)
                                      if inside(i.target) and i.target != module.name)
    # Tarjan's algorithm, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    rings: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    rings.append(sorted(component))
    return rings


def _ring_edges(modules: dict[str, ModuleSource], ring: list[str]) -> list[str]:
    members = set(ring)
    return sorted({f"{i.source} -> {i.target}" for name in ring
                   for i in imports_of(modules[name], modules) if i.target in members})


# -- the tests ----------------------------------------------------------------------------------

def test_every_module_imports() -> None:
    failed = []
    for name in sorted(MODULES):
        if name.endswith(".__main__"):
            continue  # `python -m tierlog.cli` runs the command when imported (parsed, not run)
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure to import is reported, by module
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failed, "modules that do not import:\n" + "\n".join(failed)


def test_every_module_and_import_has_a_room() -> None:
    rooms = [prefix for level in LAYERS for prefix in level]
    assert len(rooms) == len(set(rooms)), "a room is listed twice in LAYERS"
    unplaced = sorted({i.target for m in MODULES.values() for i in imports_of(m, MODULES)
                       if i.target not in MODULES})
    assert not unplaced, f"imports of modules that do not exist: {unplaced}"
    for name in MODULES:
        room_of(name)


def test_no_module_imports_upward() -> None:
    found = upward_imports(MODULES)
    new = [found[key] for key in sorted(found) if key not in KNOWN_UPWARD]
    gone = [f"{a} -> {b}" for a, b in sorted(KNOWN_UPWARD) if (a, b) not in found]
    assert not new, "upward imports:\n" + "\n".join(new)
    assert not gone, "fixed; remove from KNOWN_UPWARD:\n" + "\n".join(gone)


def test_no_module_outside_log_touches_a_logs_private_names() -> None:
    found = sorted({a for m in _outside_log(MODULES) for a in private_log_accesses(m)})
    new = [a for a in found if a not in KNOWN_PRIVATE]
    gone = [a for a in sorted(KNOWN_PRIVATE) if a not in found]
    assert not new, "a Log's private names used outside tierlog.log:\n" + "\n".join(new)
    assert not gone, "fixed; remove from KNOWN_PRIVATE:\n" + "\n".join(gone)


def test_no_import_ring_in_the_logs_rooms_or_remote() -> None:
    report = []
    found = set()
    for label, prefixes in RING_FREE_ROOMS.items():
        for ring in import_rings(MODULES, prefixes):
            found.add(tuple(ring))
            if tuple(ring) not in KNOWN_RINGS:
                report.append(f"{label}: ring of {len(ring)}: "
                              + "; ".join(_ring_edges(MODULES, ring)))
    gone = [" ".join(ring) for ring in sorted(KNOWN_RINGS) if ring not in found]
    assert not report, "import rings (type-only imports counted):\n" + "\n".join(report)
    assert not gone, "broken; remove from KNOWN_RINGS:\n" + "\n".join(gone)


# -- the checks catch what they are meant to ---------------------------------------------------

def _planted(name: str, source: str) -> dict[str, ModuleSource]:
    planted = dict(MODULES)
    planted[name] = ModuleSource(name, Path(f"{name.replace('.', '/')}.py"), ast.parse(source))
    return planted


def test_upward_imports_are_found_under_type_checking_in_functions_and_by_name() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from tierlog.log.log import Log\n"
        "def f():\n"
        "    from tierlog.manager import LogManager\n"
        "    importlib.import_module('tierlog.server.server')\n"
        "from tierlog import Log\n"
        "from tierlog.records import batch\n"
    )
    found = upward_imports(_planted("tierlog.index.planted", source))
    planted = {b for a, b in found if a == "tierlog.index.planted"}
    assert planted == {"tierlog.log.log", "tierlog.manager.log_manager", "tierlog.server.server"}
    assert "(tierlog.log above tierlog.index; line 4)" in found[
        ("tierlog.index.planted", "tierlog.log.log")]


def test_private_log_access_is_found() -> None:
    source = (
        "def f(log, other, tiered: 'Log | None', m):\n"
        "    log._segments\n"
        "    tiered._roll()\n"
        "    m.log._lock\n"
        "    self._log._known_epoch = 1\n"
        "    getattr(log, '_x')\n"
        "    other._private\n"
        "    log.__class__\n"
    )
    planted = _planted("tierlog.remote.planted", source)["tierlog.remote.planted"]
    assert sorted(private_log_accesses(planted)) == [
        "tierlog.remote.planted: getattr(log, '_x')",
        "tierlog.remote.planted: log._segments",
        "tierlog.remote.planted: m.log._lock",
        "tierlog.remote.planted: self._log._known_epoch",
        "tierlog.remote.planted: tiered._roll",
    ]


def test_a_type_only_ring_is_found() -> None:
    planted = _planted("tierlog.records.ring_a", "import tierlog.records.ring_b\n")
    planted["tierlog.records.ring_b"] = ModuleSource(
        "tierlog.records.ring_b", Path("ring_b.py"), ast.parse(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from tierlog.records.ring_a import X\n"))
    rings = import_rings(planted, ("tierlog.records",))
    assert ["tierlog.records.ring_a", "tierlog.records.ring_b"] in rings


def test_a_contract_naming_the_log_is_a_ring_through_the_plugin_host() -> None:
    # The ring issue 22 names: the Log runs plugins, the plugin host types its registry by a
    # contract, and a contract naming Log closes the ring (type-only, through the base).
    planted = _planted("tierlog.contracts.cleanup_policy", (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tierlog.log.log import Log\n"))
    rings = import_rings(planted, RING_FREE_ROOMS["log"])
    assert any({"tierlog.contracts.cleanup_policy", "tierlog.plugin_manager",
                "tierlog.log.log"} <= set(ring) for ring in rings)
