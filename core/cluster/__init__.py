"""Cluster metadata (issue 24): small JSON objects kept in the object store the tier already
uses, each changed only by a compare-and-swap (``MetadataStore``), so that the store itself,
not a clock or a home-made consensus, fences a node that lost its claim.
A node's registration and the others' judgement of its liveness (``BrokerRegistration``,
``LivenessTracker``) build on it. The leader's replica rules over one partition (``PartitionLeader``, ``ReplicaState``: the
in-sync set and the high watermark) are pure logic beside it.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.cluster.keys import BrokerRecord
    from tierlog.cluster.local_store import LocalMetadataStore
    from tierlog.cluster.open_store import open_metadata_store
    from tierlog.cluster.partition_leader import FetchOutcome, IsrProposal, PartitionLeader
    from tierlog.cluster.registry import BrokerRegistration, LivenessTracker
    from tierlog.cluster.replica_state import ReplicaState
    from tierlog.cluster.s3_store import S3MetadataStore
    from tierlog.cluster.store import MetadataStore, Versioned

_EXPORTS = {
    "BrokerRecord": "tierlog.cluster.keys",
    "BrokerRegistration": "tierlog.cluster.registry",
    "LivenessTracker": "tierlog.cluster.registry",
    "FetchOutcome": "tierlog.cluster.partition_leader",
    "IsrProposal": "tierlog.cluster.partition_leader",
    "LocalMetadataStore": "tierlog.cluster.local_store",
    "MetadataStore": "tierlog.cluster.store",
    "PartitionLeader": "tierlog.cluster.partition_leader",
    "ReplicaState": "tierlog.cluster.replica_state",
    "S3MetadataStore": "tierlog.cluster.s3_store",
    "Versioned": "tierlog.cluster.store",
    "open_metadata_store": "tierlog.cluster.open_store",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["BrokerRecord", "BrokerRegistration", "FetchOutcome", "IsrProposal",
           "LivenessTracker", "LocalMetadataStore", "MetadataStore", "PartitionLeader",
           "ReplicaState", "S3MetadataStore", "Versioned", "open_metadata_store"]
