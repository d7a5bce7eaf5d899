"""tierlog.common.clock.system_time_ms is the one wall clock in epoch milliseconds."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tierlog.common.clock import system_time_ms

ROOT = Path(__file__).resolve().parents[2]
_NOW_IN_MS = re.compile(r"time\.time\(\) \* 1000|time\.time_ns\(\) // 1_?000_?000")
#: Still computing it themselves: switched when their owners are done with them.
_NOT_YET_SWITCHED: set[str] = set()


def test_it_is_wall_time_in_whole_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = system_time_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(now, int) and before <= now <= after


def test_no_other_module_computes_now_in_ms() -> None:
    copies = []
    for path in sorted((ROOT / "core").rglob("*.py")) + sorted((ROOT / "plugins").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in _NOT_YET_SWITCHED or name == "core/common/clock.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _NOW_IN_MS.search(line):
                copies.append(f"{name}:{number}: {line.strip()}")
    assert not copies, "use tierlog.common.clock.system_time_ms:\n" + "\n".join(copies)
