"""Upkeep of a topic's table: snapshot expiry, the sweep of orphaned files, and the drop.

A crashed or losing commit leaves files no snapshot names (a data file, manifests, a manifest
list), and changes leave files only old snapshots name. Expiry forgets snapshots superseded
longer than ``remote.log.table.snapshot.retention.ms`` ago; the sweep then deletes what no
live snapshot references once it is older than ``remote.log.table.orphan.grace.ms``, and old
``v<N>.metadata.json`` beyond the newest 100. A topic's deletion drops the table's prefix.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
)
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier

from tierlog.common.clock import system_time_ms
from tierlog.config import TOPIC_CONFIG_KEYS
from tierlog.remote.table.catalog import METADATA_DIR, VERSION_HINT
from tierlog.remote.table.naming import DATA_DIR
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier, modified_ms, translate_errors

log = logging.getLogger(__name__)

#: The defaults of the topic configs ``remote.log.table.snapshot.retention.ms`` and
#: ``remote.log.table.orphan.grace.ms``.
DEFAULT_SNAPSHOT_RETENTION_MS: int = TOPIC_CONFIG_KEYS[
    "remote.log.table.snapshot.retention.ms"].default
DEFAULT_ORPHAN_GRACE_MS: int = TOPIC_CONFIG_KEYS["remote.log.table.orphan.grace.ms"].default
#: The newest metadata versions the sweep never deletes, whatever their age.
KEEP_METADATA_VERSIONS = 100
_EXPIRY_ATTEMPTS = 3
_VERSION_FILE = re.compile(r"v([1-9]\d{0,18})\.metadata\.json")


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one maintenance run did to a table."""

    expired_snapshots: int
    """Snapshots expired (superseded for longer than the retention)."""
    deleted: tuple[str, ...]
    """The objects deleted (data files, manifests, manifest lists, old metadata versions)."""
    kept_young: int
    """Unreferenced objects kept because they are younger than the grace period (a commit
    in flight, or a crash's leftovers not old enough yet)."""


class TableMaintenance:
    """Expires snapshots of and sweeps one table kept in ``tier`` (through ``catalog``, the
    tier's or a user's); ``v<N>.metadata.json`` are kept while among the newest
    ``keep_versions`` or younger than the grace (the CAS slots: a slow writer must never
    re-create a deleted one); ``time_ms`` is the clock (injected by tests). Safe to run while
    others commit: what it deletes no live snapshot names and is older than the grace, which
    bounds how long a writer may hold a file before committing it."""

    def __init__(self, tier: RemoteTier, catalog: Catalog, identifier: Identifier, *,
                 snapshot_retention_ms: int = DEFAULT_SNAPSHOT_RETENTION_MS,
                 orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
                 keep_versions: int = KEEP_METADATA_VERSIONS,
                 time_ms: Callable[[], int] = system_time_ms) -> None:
        if snapshot_retention_ms < 0 or orphan_grace_ms < 0 or keep_versions < 1:
            raise ValueError(f"retention {snapshot_retention_ms} ms and grace "
                             f"{orphan_grace_ms} ms must not be negative, and at least one "
                             f"version kept (got {keep_versions})")
        self.keep_versions = keep_versions
        self.tier = tier
        self.catalog = catalog
        self.identifier = identifier
        self.snapshot_retention_ms = snapshot_retention_ms
        self.orphan_grace_ms = orphan_grace_ms
        self._time_ms = time_ms
        self._name = ".".join(identifier)

    def run(self) -> SweepReport:
        """Expire snapshots, then sweep the orphans (the design's hourly run)."""
        expired = self.expire_snapshots()
        deleted, young = self._sweep(self.catalog.load_table(self.identifier))
        return SweepReport(expired, deleted, young)

    def expire_snapshots(self) -> int:
        """Expire the snapshots superseded more than the retention ago (never the current
        one); how many went. A snapshot stays readable for the retention after a newer one
        replaced it, whatever its own age. Lost races are retried a few times, then left to
        the next run."""
        for attempt in range(1, _EXPIRY_ATTEMPTS + 1):
            table = self.catalog.load_table(self.identifier)
            doomed = self._expired(table)
            if not doomed:
                return 0
            try:
                table.maintenance.expire_snapshots().by_ids(doomed).commit()
            except (CommitFailedException, CommitStateUnknownException) as e:
                log.info("%s: snapshot expiry lost attempt %d (%s)", self._name, attempt, e)
                continue
            log.info("%s: expired %d snapshots", self._name, len(doomed))
            return len(doomed)
        return 0

    def sweep_orphans(self) -> SweepReport:
        """Delete what no live snapshot references, older than the grace (no expiry)."""
        deleted, young = self._sweep(self.catalog.load_table(self.identifier))
        return SweepReport(0, deleted, young)

    # -- internals ------------------------------------------------------------------------

    def _expired(self, table: Table) -> list[int]:
        metadata = table.metadata
        current = metadata.current_snapshot_id
        protected = {ref.snapshot_id for ref in metadata.refs.values()}
        superseded: dict[int, int] = {}
        for snapshot in metadata.snapshots:
            parent = snapshot.parent_snapshot_id
            if parent is not None:
                superseded[parent] = min(superseded.get(parent, snapshot.timestamp_ms),
                                         snapshot.timestamp_ms)
        cutoff = self._time_ms() - self.snapshot_retention_ms
        return [s.snapshot_id for s in metadata.snapshots
                if s.snapshot_id != current and s.snapshot_id not in protected
                and superseded.get(s.snapshot_id, s.timestamp_ms) < cutoff]

    def _sweep(self, table: Table) -> tuple[tuple[str, ...], int]:
        root = self._path(table.location())
        referenced = self._referenced(table)
        versions = sorted((int(m.group(1)), path) for path, _ in self._files(f"{root}/"
                                                                             f"{METADATA_DIR}")
                          if (m := _VERSION_FILE.fullmatch(path.rsplit("/", 1)[-1])))
        kept = {path for _, path in versions[-self.keep_versions:]}
        old = {path for _, path in versions} - kept
        referenced = (referenced | kept | {f"{root}/{METADATA_DIR}/{VERSION_HINT}"}) - old
        now = self._time_ms()
        deleted: list[str] = []
        young = 0
        for directory in (DATA_DIR, METADATA_DIR):
            for path, modified in self._files(f"{root}/{directory}"):
                if path in referenced:
                    continue
                if modified is None or now - modified < self.orphan_grace_ms:
                    young += 1
                    continue
                self.tier.delete(path)
                deleted.append(path)
        if deleted:
            log.info("%s: swept %d orphaned objects", self._name, len(deleted))
        return tuple(deleted), young

    def _referenced(self, table: Table) -> set[str]:
        """Every object a live snapshot of ``table`` reads: manifest lists, manifests, data
        files, and the metadata files the current one names (its log: a user catalog's
        names; the tier's ``v<N>`` versions are kept by number instead)."""
        io = table.io
        found = {self._path(table.metadata_location)}
        found.update(self._path(entry.metadata_file) for entry in table.metadata.metadata_log)
        manifests: set[str] = set()
        for snapshot in table.metadata.snapshots:
            found.add(self._path(snapshot.manifest_list))
            for manifest in snapshot.manifests(io):
                path = self._path(manifest.manifest_path)
                if path in manifests:
                    continue
                manifests.add(path)
                found.update(self._path(entry.data_file.file_path) for entry in
                             manifest.fetch_manifest_entry(io, discard_deleted=True))
        return found | manifests

    def _files(self, directory: str) -> Iterator[tuple[str, int | None]]:
        """Every object under ``directory`` (recursively, ``.partial`` leftovers included)
        with its modification time."""
        with translate_errors("list", directory):
            self.tier.stats.record("lists")
            self.tier.fs.invalidate_cache(directory)
            try:
                found: Any = self.tier.fs.find(directory, detail=True)
            except FileNotFoundError:
                return
        for path, info in sorted(found.items()):
            if info.get("type", "file") == "file":
                yield str(path), modified_ms(info)

    def _path(self, location: str) -> str:
        return str(self.tier.fs._strip_protocol(location)).rstrip("/")


def drop_table(tier: RemoteTier, topic: str, topic_id: str, catalog: Catalog | None = None,
               identifier: Identifier | None = None) -> None:
    """Drop a topic incarnation's table: from ``catalog`` when given (a user's catalog; one
    that does not know it is fine), then every object under its prefix in the tier. Nothing
    to do when there is none."""
    if catalog is not None and identifier is not None:
        with contextlib.suppress(NoSuchTableError):
            catalog.drop_table(identifier)
    path = tier.path(table_key(topic, topic_id))
    with translate_errors("delete", path), contextlib.suppress(FileNotFoundError):
        tier.stats.record("deletes")
        tier.fs.rm(path, recursive=True)
