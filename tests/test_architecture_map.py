"""docs/architecture.md's module map names every module of the package, and only modules that
exist, so the map a newcomer reads cannot go stale again."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "architecture.md"
#: Package markers, not modules with a job of their own.
NOT_MAPPED = {"__init__.py", "__main__.py"}


def modules_on_disk() -> set[str]:
    """Every source module: core/ as the package root, plugins/ by its own path."""
    found = set()
    for base, prefix in ((ROOT / "core", ""), (ROOT / "plugins", "plugins/")):
        for path in base.rglob("*"):
            if path.suffix in {".py", ".c", ".h"} and path.name not in NOT_MAPPED:
                found.add(prefix + path.relative_to(base).as_posix())
    return found


def modules_in_the_map() -> list[str]:
    """The first cell of every row of the module map's tables."""
    text = MAP.read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        cell = re.match(r"\|\s*`([^`|]+)`\s*\|", line)
        if cell:
            names.append(cell.group(1))
    return names


def test_the_module_map_names_every_module_once_and_nothing_else() -> None:
    listed = modules_in_the_map()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    on_disk = modules_on_disk()
    assert not on_disk - set(listed), f"not in docs/architecture.md: {sorted(on_disk - set(listed))}"
    assert not set(listed) - on_disk, f"listed but missing: {sorted(set(listed) - on_disk)}"
