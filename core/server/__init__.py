"""tierlog.server: Kafka's wire protocol over a LogManager (``tierlog serve``).

Message types come from ``kio`` (generated from Kafka's own message schemas). The network
side (listeners, framing, dispatch, the partition APIs) and the coordinators (consumer groups,
transactions) meet through :mod:`tierlog.server.context`.
"""
