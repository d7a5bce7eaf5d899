"""TierCatalog: the default catalog of the topics' tables, a pyiceberg catalog kept in the remote
tier itself (nothing outside the bucket), in the Hadoop-table layout every engine reads by path.

```text
<root>/_tables/<topic>-<topicId>/metadata/v<N>.metadata.json   created exclusively: the commit
<root>/_tables/<topic>-<topicId>/metadata/version-hint.text    "<N>", best effort (may lag)
```
A commit is the exclusive create (``RemoteTier.put_if_absent``) of ``v<N+1>.metadata.json``
over the latest ``v<N>``: of two writers on the same base one creates it, the other gets
CommitFailedException. An outcome that is not known (a timeout, a 5xx: the create may have
landed) is CommitStateUnknownException, never CommitFailedException, because pyiceberg deletes
the manifests of a commit reported failed, which would break one that landed.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping

import pyarrow as pa
from pyiceberg.catalog import MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import FileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View

from tierlog.errors import (
    ConfigError,
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.remote.table.file_io import TierFileIO
from tierlog.remote.tier.layout import TABLES_DIR
from tierlog.remote.tier.object_store import RemoteTier, translate_errors

log = logging.getLogger(__name__)

#: The one namespace of a tier's catalog.
NAMESPACE = "tierlog"
METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
_VERSION_NAME = re.compile(r"v([1-9]\d{0,18})\.metadata\.json")
#: A table name is one directory of ``_tables/``.
_TABLE_NAME = re.compile(r"[A-Za-z0-9._-]+")

#: Table properties the catalog fixes: a table created or changed with another value is refused.
#: pyiceberg's own commit retry rebuilds a snapshot on the new head with the summary computed on
#: the old one, losing another writer's coverage: the committer retries instead, recomputing it.
#: The metadata files are the commits' compare-and-swap slots: only the sweep deletes them.
FIXED_PROPERTIES: Mapping[str, str] = {
    "commit.retry.num-retries": "0",
    "write.metadata.delete-after-commit.enabled": "false",
}
#: Defaults of a new table's properties (a caller may set others).
DEFAULT_PROPERTIES: Mapping[str, str] = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "20",
    **FIXED_PROPERTIES,
}


def table_location(tier: RemoteTier, key: str) -> str:
    """The location pyiceberg and other engines name the table ``key`` (a layout key) by: the
    plain path on a local tier, the filesystem's URL (``s3://bucket/...``) otherwise."""
    path = tier.path(key)
    protocol = tier.fs.protocol if isinstance(tier.fs.protocol, str) else tier.fs.protocol[0]
    return path if protocol in ("file", "local") else str(tier.fs.unstrip_protocol(path))


def check_fixed_properties(properties: Mapping[str, str]) -> None:
    """ConfigError naming the key when ``properties`` give a fixed property another value."""
    for key, value in FIXED_PROPERTIES.items():
        if key in properties and properties[key] != value:
            raise ConfigError(key, f"a tier table needs {value!r}, got {properties[key]!r}")


class TierCatalog(MetastoreCatalog):
    """The tables under ``<root>/_tables/`` of one remote tier, as namespace ``tierlog``.

    Loading costs a GET of the version hint, a HEAD of the version after it (more while the hint
    lags; a LIST of ``metadata/`` when there is no usable hint) and a GET of the metadata.
    ``register_table``, ``rename_table``, namespace changes and views are not offered.
    Thread-safe as the tier is; any number of processes may commit to one table.
    """

    def __init__(self, tier: RemoteTier, name: str = NAMESPACE, **properties: str) -> None:
        super().__init__(name, **properties)
        self.tier = tier

    # -- where things are -----------------------------------------------------------------

    def _key(self, identifier: str | Identifier) -> str:
        namespace, name = self.identifier_to_database_and_table(identifier, NoSuchTableError)
        if namespace != NAMESPACE:
            raise NoSuchTableError(f"no namespace {namespace!r} in the tier's catalog (only "
                                   f"{NAMESPACE!r})")
        if not _TABLE_NAME.fullmatch(name) or name in (".", ".."):
            raise NoSuchTableError(f"{name!r} is not a table name of the tier's catalog")
        return f"{TABLES_DIR}/{name}"

    def _version_path(self, key: str, version: int) -> str:
        return self.tier.path(key, METADATA_DIR, f"v{version}.metadata.json")

    def _exists(self, path: str) -> bool:
        try:
            self.tier.size(path)
        except RemoteResourceNotFoundError:
            return False
        return True

    def latest_version(self, identifier: str | Identifier) -> int | None:
        """The newest committed version of a table, None when it has none: the hint, then one
        HEAD per version past it until one is absent; a LIST when the hint is unusable."""
        key = self._key(identifier)
        hinted = self._hinted_version(key)
        if hinted is None or not self._exists(self._version_path(key, hinted)):
            found = [int(m.group(1)) for name in
                     self.tier.list_names(self.tier.path(key, METADATA_DIR))
                     if (m := _VERSION_NAME.fullmatch(name))]
            return max(found, default=None)
        while self._exists(self._version_path(key, hinted + 1)):
            hinted += 1
        return hinted

    def _hinted_version(self, key: str) -> int | None:
        try:
            text = self.tier.get_bytes(self.tier.path(key, METADATA_DIR, VERSION_HINT))
        except RemoteResourceNotFoundError:
            return None
        hint = text.decode("ascii", errors="replace").strip()
        if not _VERSION_NAME.fullmatch(f"v{hint}.metadata.json"):
            log.warning("%s: version hint %r is not a version; listing the metadata",
                        self.tier.path(key), hint[:40])
            return None
        return int(hint)

    def _table(self, identifier: str | Identifier, key: str, version: int) -> Table:
        path = self._version_path(key, version)
        text = self.tier.get_bytes(path)
        try:
            metadata = TableMetadataUtil.parse_raw(text.decode("utf-8"))
        except ValueError as e:  # pydantic's ValidationError and UnicodeDecodeError are
            raise CorruptRemoteMetadataError(f"{path} is not Iceberg table metadata: "
                                             f"{str(e)[:300]}") from e
        return Table(identifier=(NAMESPACE, self.table_name_from(identifier)), metadata=metadata,
                     metadata_location=self._location_of(path), io=self._load_file_io(),
                     catalog=self)

    def _location_of(self, path: str) -> str:
        return table_location(self.tier, path[len(self.tier.root) + 1:])

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None
                      ) -> FileIO:
        return TierFileIO(self.tier, {**self.properties, **properties})

    def _commit(self, key: str, version: int, metadata: TableMetadata) -> str:
        """Create ``v<version>`` holding ``metadata`` and point the hint at it; its path."""
        path = self._version_path(key, version)
        body = metadata.model_dump_json(exclude_none=True).encode("utf-8")
        try:
            created = self.tier.put_if_absent(body, path)
        except RemoteStorageError as e:  # it may have landed
            raise CommitStateUnknownException(f"create {path}: {e}") from e
        if not created:
            raise CommitFailedException(f"{path} exists: a concurrent commit won")
        with contextlib.suppress(RemoteStorageError):  # readers probe past a stale hint
            self.tier.put_bytes(str(version).encode("ascii"),
                                self.tier.path(key, METADATA_DIR, VERSION_HINT))
        return self._location_of(path)

    # -- tables ---------------------------------------------------------------------------

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        """Create the table as ``v1``, with DEFAULT_PROPERTIES under ``properties``;
        TableAlreadyExistsError when it has a version; ConfigError when ``properties`` change a
        fixed property or ``location`` is not the table's place in the tier."""
        key = self._key(identifier)
        staged = self._create_staged_table(identifier, schema, location, partition_spec,
                                           sort_order, properties)
        if self.latest_version(identifier) is not None:
            raise TableAlreadyExistsError(f"table {self.tier.path(key)} exists")
        try:
            self._commit(key, 1, staged.metadata)
        except CommitFailedException as e:
            raise TableAlreadyExistsError(str(e)) from e
        return self._table(identifier, key, 1)

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        """A new table's first metadata at its place in the tier with DEFAULT_PROPERTIES
        (also for ``create_table_transaction``); ConfigError when ``location`` is another place
        or ``properties`` change a fixed property."""
        home = table_location(self.tier, self._key(identifier))
        if location is not None and location.rstrip("/") != home:
            raise ConfigError("location", f"a tier table lives at {home}, not {location}")
        check_fixed_properties(properties)
        return super()._create_staged_table(identifier, schema, home, partition_spec, sort_order,
                                            {**DEFAULT_PROPERTIES, **properties})

    def load_table(self, identifier: str | Identifier) -> Table:
        """The table at its latest version; NoSuchTableError when it has none."""
        key = self._key(identifier)
        version = self.latest_version(identifier)
        if version is None:
            raise NoSuchTableError(f"no table at {self.tier.path(key)}")
        return self._table(identifier, key, version)

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Validate ``requirements`` against the latest version N and create ``v<N+1>`` with
        ``updates`` applied. CommitFailedException when a requirement fails or another commit
        created ``v<N+1>`` first; CommitStateUnknownException when the create's outcome is
        unknown; ConfigError when the updates change a fixed property."""
        identifier = table.name()
        key = self._key(identifier)
        version = self.latest_version(identifier)
        current = None if version is None else self._table(identifier, key, version)
        staged = self._update_and_stage_table(current, identifier, requirements, updates)
        check_fixed_properties({k: staged.metadata.properties.get(k, "<removed>")
                                for k in FIXED_PROPERTIES})
        location = self._commit(key, (version or 0) + 1, staged.metadata)
        # By field name, as pyiceberg's own catalogs do (the model also accepts its alias).
        return CommitTableResponse(metadata=staged.metadata,
                                   metadata_location=location)  # type: ignore[call-arg]

    def table_exists(self, identifier: str | Identifier) -> bool:
        return self.latest_version(identifier) is not None

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        self._check_namespace(namespace)
        return [(NAMESPACE, name) for name in
                self.tier.list_names(self.tier.path(TABLES_DIR), dirs=True)
                if _TABLE_NAME.fullmatch(name) and self.table_exists((NAMESPACE, name))]

    def drop_table(self, identifier: str | Identifier) -> None:
        """Delete the table's every object (data, manifests, metadata)."""
        key = self._key(identifier)
        if not self.table_exists(identifier):
            raise NoSuchTableError(f"no table at {self.tier.path(key)}")
        with translate_errors("delete", self.tier.path(key)):
            self.tier.fs.rm(self.tier.path(key), recursive=True)

    def purge_table(self, identifier: str | Identifier) -> None:
        self.drop_table(identifier)

    # -- the one namespace ----------------------------------------------------------------

    def _check_namespace(self, namespace: str | Identifier) -> None:
        if self.identifier_to_tuple(namespace) != (NAMESPACE,):
            raise NoSuchNamespaceError(f"no namespace {namespace!r} in the tier's catalog")

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        return [] if self.identifier_to_tuple(namespace) else [(NAMESPACE,)]

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        self._check_namespace(namespace)
        return {"location": table_location(self.tier, TABLES_DIR)}

    def create_namespace(self, namespace: str | Identifier,
                         properties: Properties = EMPTY_DICT) -> None:
        raise NotImplementedError("the tier's catalog has one namespace, 'tierlog'")

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self._check_namespace(namespace)
        raise NamespaceNotEmptyError("the tier's catalog keeps its one namespace")

    def update_namespace_properties(self, namespace: str | Identifier,
                                    removals: set[str] | None = None,
                                    updates: Properties = EMPTY_DICT
                                    ) -> PropertiesUpdateSummary:
        raise NotImplementedError("the tier's catalog has no namespace properties to change")

    # -- not offered ----------------------------------------------------------------------

    def register_table(self, identifier: str | Identifier, metadata_location: str,
                       overwrite: bool = False) -> Table:
        raise NotImplementedError("the tier's catalog creates its tables; it registers none")

    def rename_table(self, from_identifier: str | Identifier,
                     to_identifier: str | Identifier) -> Table:
        raise NotImplementedError("a tier table is named by its topic; it is not renamed")

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return []

    def view_exists(self, identifier: str | Identifier) -> bool:
        return False

    def load_view(self, identifier: str | Identifier) -> View:
        raise NotImplementedError("the tier's catalog has no views")

    def drop_view(self, identifier: str | Identifier) -> None:
        raise NotImplementedError("the tier's catalog has no views")

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        raise NotImplementedError("the tier's catalog has no views")
