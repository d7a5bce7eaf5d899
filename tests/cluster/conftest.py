"""What the cluster room's tests share: the metadata-store fixtures (``store`` on a local
directory or on moto's S3, ``s3_store``, ``serialized_s3`` and its ``front``), from
``support.store_fixtures``.
"""

from support.store_fixtures import front, s3_store, serialized_s3, store

__all__ = ["front", "s3_store", "serialized_s3", "store"]
