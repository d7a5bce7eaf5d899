"""tierlog.server: Kafka's wire protocol over a LogManager (``tierlog serve``).

Message types come from ``kio`` (generated from Kafka's own message schemas). The network
side (listeners, framing, dispatch, the partition APIs) and the coordinators (consumer groups,
transactions) meet through :mod:`tierlog.server.context`. ``tierlog serve`` runs it from the
command line; :class:`BackgroundServer` runs it inside a Python program.
"""

from tierlog.server.background import BackgroundServer

__all__ = ["BackgroundServer"]
