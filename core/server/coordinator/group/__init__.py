"""The group coordinator (Kafka's GroupCoordinator): members,
rebalances, and committed offsets kept in __consumer_offsets.
"""
