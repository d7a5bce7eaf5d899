"""Leaf helpers every room may use: atomic writes, file names, .properties files,
the scheduler, Kafka's default partitioner and small statistics.
"""
