"""What the security room's tests share (credentials and ACLs live in the cluster store): the metadata-store fixtures (``store`` on a local
directory or on moto's S3, ``s3_store``, ``serialized_s3`` and its ``front``), from
``support.store_fixtures``.
"""

from support.store_fixtures import front, s3_store, serialized_s3, store

__all__ = ["front", "s3_store", "serialized_s3", "store"]
