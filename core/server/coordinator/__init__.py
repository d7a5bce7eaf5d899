"""The group and transaction coordinators: their configuration,
timers, wire helpers and the internal topics they keep state in.
"""
