"""Java's int bounds have one home, tierlog.common.int_bounds: no other module spells them out."""

from __future__ import annotations

import re
from pathlib import Path

from tierlog.common.int_bounds import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

ROOT = Path(__file__).resolve().parents[2]
#: Spellings of 2**31 - 1 (``& 0x7fffffff``, Kafka's ``toPositive`` mask, is another rule).
_INT32_MAX_LITERAL = re.compile(
    r"\(1 << 31\) - 1|2 ?\*\* ?31 - 1|2147483647|0x7fffffff", re.IGNORECASE)
#: Still defining its own copy: switched when its owner is done with it.
_NOT_YET_SWITCHED: set[str] = set()


def test_the_bounds_are_javas() -> None:
    assert (INT32_MIN, INT32_MAX) == (-2**31, 2**31 - 1)
    assert (INT64_MIN, INT64_MAX) == (-2**63, 2**63 - 1)


def test_no_other_module_spells_out_int32_max() -> None:
    copies = []
    for path in sorted((ROOT / "core").rglob("*.py")) + sorted((ROOT / "plugins").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in _NOT_YET_SWITCHED or name == "core/common/int_bounds.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _INT32_MAX_LITERAL.search(line) and "& 0x7" not in line:
                copies.append(f"{name}:{number}: {line.strip()}")
    assert not copies, "use tierlog.common.int_bounds.INT32_MAX:\n" + "\n".join(copies)
