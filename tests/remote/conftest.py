"""What the remote room's tests share, beyond tests/conftest.py (``manager``, ``tier_url``,
moto's S3): an empty local tier, its own catalog holding the test table (``support.table_files``)
and a committer of that table, and one local segment to copy into a tier.

A module whose ``tier`` is something else (a tier written by a LogManager, a copy of a
prepared one, a partition directory) defines its own ``tier``, which overrides this one.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from support.remote_storage_suite import SegmentFiles, write_segment
from support.table_files import IDENT, create_table, no_backoff

from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter
from tierlog.remote.tier.object_store import RemoteTier


@pytest.fixture
def tier(tmp_path: Path) -> RemoteTier:
    """An empty tier over the local directory ``tmp_path/tier``."""
    return RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))


@pytest.fixture
def catalog(tier: RemoteTier) -> TierCatalog:
    """``tier``'s own catalog, holding ``support.table_files``' table (no snapshot yet)."""
    catalog = TierCatalog(tier)
    create_table(catalog)
    return catalog


@pytest.fixture
def committer(catalog: TierCatalog) -> TableCommitter:
    """A committer of ``catalog``'s test table that never sleeps between attempts."""
    return TableCommitter(catalog, IDENT, backoff=no_backoff)


@pytest.fixture
def segment(tmp_path: Path) -> SegmentFiles:
    """One closed local segment (offsets from 0, with its indexes) under ``tmp_path/local``."""
    return write_segment(tmp_path / "local", 0)
