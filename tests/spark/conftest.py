"""The spark room (the data source, planning, columns, options, streams, writes): nothing of
its own to share; the one local ``spark`` session, the built ``tier`` and ``s3_tier`` (once per
module, ``TIER_SEGMENT_BYTES`` = 6000 for a few tasks per partition), ``manager`` and
``tier_url`` come from tests/conftest.py, which the reader and remote rooms share."""
