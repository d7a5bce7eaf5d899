"""tierlog.reader over a topic without a table: the read costs one LIST of ``_tables/`` and
loads nothing of pyiceberg (0.4-0.7 s to import, most of a one-shot read of 1 M records) nor of
the restore (0.15 s more), and reads the same rows as ``use_table=False``."""

from __future__ import annotations

import subprocess
import sys

from support.tier_builder import BuiltTier

SCRIPT = """
import sys
from tierlog.reader import RemoteTopicReader
reader = RemoteTopicReader(sys.argv[1])
rows = reader.read_table("orders").num_rows
print(rows, reader.read_table("orders", use_table=False).num_rows,
      "pyiceberg" in sys.modules, "tierlog.remote.ops.restore" in sys.modules)
"""


def test_a_topic_without_a_table_is_read_without_pyiceberg(tier: BuiltTier) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, tier.url], capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out[0] == out[1] != "0"
    assert out[2:] == ["False", "False"]
