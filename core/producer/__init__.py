"""Idempotent and transactional producer state (Kafka's ProducerStateManager):
one append's validation, the producer map, and its .snapshot files.
"""
