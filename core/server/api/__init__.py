"""The Kafka APIs this server answers, one module per API family:
produce, fetch, list offsets, metadata, admin, versions, groups, txns.
"""
