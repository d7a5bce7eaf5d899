"""Every tierlog hook: the variation points plugins implement, found through entry points.

Hooks are named ``tierlog_<verb>_<noun>``. Registration hooks receive a ``register`` callback;
event hooks are called after the event with an immutable event object, and return nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

from tierlog.events import RemoteSegmentEvent, SegmentDeleted, SegmentRolled

if TYPE_CHECKING:
    # Only for the hooks' signatures: the contracts, which sit beside the hook specs.
    from tierlog.contracts.cleanup_policy import CleanupPolicy
    from tierlog.contracts.remote_metadata import RemoteLogMetadataFactory
    from tierlog.contracts.remote_storage import RemoteStorageFactory
    from tierlog.contracts.segment_index import SegmentIndexType

PROJECT_NAME = "tierlog"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- registration ---------------------------------------------------------------------


@hookspec
def tierlog_register_index_types(register: Callable[[SegmentIndexType], None]) -> None:
    """Called once, when plugins load. Call ``register(index_type)`` for each segment index
    implementation the plugin provides.

    An index type (see :class:`tierlog.index.index_types.SegmentIndexType`) declares its ``name``,
    its file ``suffix``, whether it is ``uploaded_to_remote``, and ``open(...)``, which returns
    the per-segment index: fed on every append (``on_append``), rebuilt on recovery
    (``reset`` + ``on_append`` for every batch), asked by ``lookup``. The built-in offset, time
    and transaction indexes are registered through this same hook.
    """


@hookspec
def tierlog_register_cleanup_policies(
    register: Callable[[str, CleanupPolicy[Any]], None],
) -> None:
    """Called once, when plugins load. Call ``register(name, policy)`` for each cleanup policy
    (the values of ``cleanup.policy``). A policy (:class:`tierlog.cleaner.policy.CleanupPolicy`)
    has ``clean(log, now_ms) -> CleanupResult``; the engine passes a ``tierlog.log.log.Log``
    (the contract is generic in the log, so the hook specs name nothing of the engine).
    The built-in ``delete`` and ``compact`` policies are registered through this same hook.
    """


@hookspec
def tierlog_register_remote_storage(
    register: Callable[[str, RemoteStorageFactory], None],
) -> None:
    """Called once, when plugins load. Call ``register(name, factory)`` for each remote storage
    backend (:data:`tierlog.remote.api.RemoteStorageFactory`):
    ``factory(url: str, options: Mapping[str, Any]) -> RemoteStorageManager``. The
    ``remote.storage.manager`` setting picks one by name (``local`` and ``s3`` are built in).
    Any object meeting the :class:`~tierlog.remote.api.RemoteStorageManager` contract
    will do; one without a tier of tierlog's keeps its segment metadata in the first log dir.
    """


@hookspec
def tierlog_register_remote_metadata_managers(
    register: Callable[[str, RemoteLogMetadataFactory], None],
) -> None:
    """Called once, when plugins load. Call ``register(name, factory)`` for each segment
    metadata store (:class:`tierlog.remote.metadata_api.RemoteLogMetadataStore`);
    ``factory(rsm, log_dir)`` builds it for the RemoteStorageManager ``rsm``. The
    ``remote.log.metadata.manager.class.name`` setting picks one by name; empty picks ``tier``
    (in the remote tier) for an RSM with a tier and ``log-dir`` (the first log dir) otherwise.
    """


# -- lifecycle events -------------------------------------------------------------------
# Each receives one immutable event object (see tierlog.events), never a live Log or segment.
# They are called after the event, outside the log's lock; a hook that raises is logged
# (rate-limited, naming the plugin) and skipped: the engine and the other plugins go on.


@hookspec
def tierlog_segment_rolled(event: SegmentRolled) -> None:
    """Called after a log rolled: ``event`` names the partition, the segment that just became
    inactive (``base_offset``, ``size_in_bytes``, ``max_timestamp``) and ``next_offset``, the
    base offset of the new active segment."""


@hookspec
def tierlog_segment_deleted(event: SegmentDeleted) -> None:
    """Called after a local segment left a log (retention, truncation, log start offset);
    ``event.reason`` says which."""


@hookspec
def tierlog_segment_copied_to_remote(event: RemoteSegmentEvent) -> None:
    """Called after a segment's copy to the remote tier was committed (COPY_SEGMENT_FINISHED);
    ``event.metadata`` is its RemoteLogSegmentMetadata."""


@hookspec
def tierlog_remote_segment_deleted(event: RemoteSegmentEvent) -> None:
    """Called after a remote segment was deleted (DELETE_SEGMENT_FINISHED)."""
