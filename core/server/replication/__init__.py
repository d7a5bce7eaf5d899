"""Replication between ``tierlog serve`` nodes (issue 24): the asyncio parts that join the
cluster room's store and rules (``tierlog.cluster``) with the log manager and Kafka's wire
protocol. A follower talks to its leader as Kafka's replica fetcher does, over the same
protocol clients use (``wire_client``)."""
