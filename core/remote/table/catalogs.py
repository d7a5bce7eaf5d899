"""Which catalog holds a topic's table: the tier's own (TierCatalog, the default) or a user's
(REST, Glue, SQL, ... named by the topic's ``remote.log.table.catalog.*``), and how a reader with
nothing but the bucket finds a user catalog's table (DESIGN §3.4).

A user catalog's table still lives in the tier (its location is the topic's place under
``_tables/``) and is changed by the same commit loop. After each commit the committer PUTs
``_pointer.json`` next to it, best effort::

    {"catalog": "tierlog", "catalogImpl": "SqlCatalog", "identifier": ["tierlog", "<t>-<id>"],
     "metadataLocation": "<location>/metadata/<...>.metadata.json"}

so readers, ``tierlog restore`` and ``tierlog scrub`` find a snapshot through the bucket alone.
A stale pointer is still correct: readers split at that snapshot's coverage and the tail
reads the rest. Writers that cannot know a user catalog's properties (a CLI over a bare
bucket) refuse to change its table (TableCatalogRequiredError) rather than fork it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import StaticTable, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier

from tierlog.config import TABLE_CATALOG_PREFIX
from tierlog.errors import (
    ConfigError,
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
    TableCatalogRequiredError,
)
from tierlog.remote.table.catalog import METADATA_DIR, NAMESPACE, TierCatalog, table_location
from tierlog.remote.table.file_io import TierFileIO
from tierlog.remote.table.schema import open_or_create_table, table_identifier
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

#: The name a user's catalog is loaded under (``pyiceberg.catalog.load_catalog(name, ...)``).
USER_CATALOG_NAME = "tierlog"
#: The object next to a user catalog's table naming its current metadata.
POINTER = "_pointer.json"


@dataclass(frozen=True, slots=True)
class TablePointer:
    """The content of a table's ``_pointer.json``."""

    catalog: str
    catalog_impl: str
    identifier: tuple[str, ...]
    metadata_location: str


def open_catalog(tier: RemoteTier, properties: Mapping[str, str]) -> Catalog:
    """The catalog of a topic's table: the tier's TierCatalog when ``properties`` (the topic's
    ``remote.log.table.catalog.*``, prefix removed) is empty, else the user's catalog
    ``pyiceberg.catalog.load_catalog("tierlog", **properties)``, its namespace ``tierlog``
    created when missing. ConfigError naming the catalog's keys when it cannot be loaded."""
    if not properties:
        return TierCatalog(tier)
    try:
        catalog = load_catalog(USER_CATALOG_NAME, **dict(properties))
        catalog.create_namespace_if_not_exists(NAMESPACE)
    except Exception as exc:
        raise ConfigError(f"{TABLE_CATALOG_PREFIX}*",
                          f"the topic table's catalog ({_describe(properties)}) cannot be "
                          f"opened: {type(exc).__name__}: {exc}") from exc
    return catalog


def open_topic_table(tier: RemoteTier, catalog: Catalog, topic: str, topic_id: str) -> Table:
    """The topic's table in ``catalog``, created when missing; a user catalog's at the topic's
    place in the tier (``location=``), with the fixed properties checked either way.
    ConfigError when a user catalog already holds the table somewhere else."""
    if isinstance(catalog, TierCatalog):
        return open_or_create_table(catalog, topic, topic_id)
    location = table_location(tier, table_key(topic, topic_id))
    table = open_or_create_table(catalog, topic, topic_id, location=location)
    if table.location().rstrip("/") != location.rstrip("/"):
        raise ConfigError(f"{TABLE_CATALOG_PREFIX}*",
                          f"table {'.'.join(table.name())} of catalog {catalog.name!r} is at "
                          f"{table.location()}, not at the topic's place in the tier "
                          f"{location}")
    return table


def write_pointer(catalog: Catalog, identifier: Identifier, table: Table) -> None:
    """After a commit through ``catalog``: PUT the table's ``_pointer.json`` naming its new
    metadata (nothing for the tier's own catalog, which bucket readers find by path). Best
    effort: a failure is logged; readers then use an older pointer, which is still correct."""
    if isinstance(catalog, TierCatalog):
        return
    body = json.dumps({"catalog": catalog.name, "catalogImpl": type(catalog).__name__,
                       "identifier": list(identifier),
                       "metadataLocation": table.metadata_location}).encode()
    where = f"{table.location().rstrip('/')}/{POINTER}"
    try:
        with table.io.new_output(where).create(overwrite=True) as out:
            out.write(body)
    except Exception as exc:  # noqa: BLE001 - best effort: the commit is done
        log.warning("%s: its pointer %s was not written (bucket-only readers see an older "
                    "snapshot): %s", ".".join(identifier), where, exc)


def read_pointer(tier: RemoteTier, topic: str, topic_id: str) -> TablePointer | None:
    """The topic's table pointer (None: no user catalog's table). CorruptRemoteMetadataError
    naming the object when it is malformed or names metadata outside the table's place."""
    key = table_key(topic, topic_id)
    path = tier.path(key, POINTER)
    try:
        raw = tier.get_bytes(path)
    except RemoteResourceNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        pointer = TablePointer(str(doc["catalog"]), str(doc.get("catalogImpl", "?")),
                               tuple(str(p) for p in doc["identifier"]),
                               str(doc["metadataLocation"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRemoteMetadataError(f"{path}: not a table pointer: {exc}") from exc
    metadata_dir = tier.path(key, METADATA_DIR) + "/"
    stripped = str(tier.fs._strip_protocol(pointer.metadata_location))
    if not stripped.startswith(metadata_dir) or "/../" in stripped \
            or not stripped.endswith(".metadata.json"):
        raise CorruptRemoteMetadataError(
            f"{path}: names metadata {pointer.metadata_location!r} outside the table's "
            f"{metadata_dir}")
    return pointer


def load_topic_table(tier: RemoteTier, topic: str, topic_id: str) -> Table | None:
    """The topic's table as a reader with only the bucket finds it: the tier catalog's when its
    metadata exists, else the snapshot a user catalog's pointer names (a read-only
    ``StaticTable`` through the tier's FileIO), else None."""
    identifier = table_identifier(topic, topic_id)
    try:
        return TierCatalog(tier).load_table(identifier)
    except NoSuchTableError:
        pass
    pointer = read_pointer(tier, topic, topic_id)
    if pointer is None:
        return None
    io = TierFileIO(tier)
    metadata = FromInputFile.table_metadata(io.new_input(pointer.metadata_location))
    return static_table(tier, identifier, metadata, pointer.metadata_location)


def static_table(tier: RemoteTier, identifier: Identifier, metadata: TableMetadata,
                 metadata_location: str) -> Table:
    """A read-only table of ``metadata`` (as loaded from ``metadata_location``, by whichever
    catalog) reading its files through the tier's FileIO: what a process holding no catalog
    (a bucket-only reader, a Spark executor converting for the driver's table) works with."""
    return StaticTable(identifier=identifier, metadata=metadata,
                       metadata_location=metadata_location, io=TierFileIO(tier),
                       catalog=NoopCatalog("static-table"))


def writer_catalog(tier: RemoteTier, topic: str, topic_id: str,
                   properties: Mapping[str, str] | None = None) -> Catalog:
    """The catalog a writer changes the topic's table through: ``open_catalog`` of
    ``properties`` when the writer knows the topic's config; otherwise (a CLI over a bare
    bucket) the tier's own, or TableCatalogRequiredError naming the catalog when a user's
    catalog owns the table (its pointer exists): changing it behind that catalog would fork
    the table."""
    if properties:
        return open_catalog(tier, properties)
    pointer = read_pointer(tier, topic, topic_id)
    if pointer is not None:
        raise TableCatalogRequiredError(
            f"{TABLE_CATALOG_PREFIX}*",
            f"table {'.'.join(pointer.identifier)} is owned by the user's catalog "
            f"{pointer.catalog!r} ({pointer.catalog_impl}); this writer was not given its "
            f"properties, so it does not change the table")
    return TierCatalog(tier)


def _describe(properties: Mapping[str, str]) -> str:
    """The catalog's type and keys, never values (a uri or token may hold a secret)."""
    kind = properties.get("type", "type from uri")
    return f"{kind}; keys {', '.join(sorted(properties))}"


__all__ = ["POINTER", "TablePointer", "load_topic_table", "open_catalog", "open_topic_table",
           "read_pointer", "static_table", "write_pointer", "writer_catalog"]
