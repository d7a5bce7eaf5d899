"""The reader room (tierlog.reader over tiers on the local and s3 plugins): nothing of its own
to share; the built ``tier`` and ``s3_tier`` (once per module), ``manager`` and ``tier_url``
come from tests/conftest.py, which the spark room shares."""
