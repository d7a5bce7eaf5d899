"""The remote tier's objects: their layout and names, fsspec I/O, manifests,
storage options, ownership and topic ids kept in the tier.
"""
