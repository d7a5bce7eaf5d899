"""Operator jobs over the tier: backfill from Arrow, restore of a data dir from
the tier, scrub of its objects, and adoption of foreign segments.
"""
